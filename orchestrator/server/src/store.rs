//! The durable job store: one SQLite database in the data directory.
//!
//! Every change of a job's state is one statement in its own transaction,
//! committed with `synchronous=FULL` in WAL mode, so a server killed at any
//! moment restarts with each job in the state it last reached. The worker
//! claims a job with a single `UPDATE ... RETURNING` (queued → running), and
//! ends it with an `UPDATE` guarded by `state = 'running'`: a job finishes
//! exactly once. On start, [`Store::recover`] puts jobs a dead server was
//! running back in the queue (or marks them cancelled, when a cancel was
//! asked for) and drops submissions that never finished arriving.
//!
//! PostgreSQL, for several servers sharing one queue, needs the same table
//! and the same statements, with `SELECT ... FOR UPDATE SKIP LOCKED` in the
//! claim and the job directories on shared storage (docs/api.md, "Store").

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension, Row};
use sts_client::{Job, JobRequest, Kind, Outcome, State};

/// The store's schema. `preparing` is internal: a submission whose files are
/// still being written; it becomes `queued` once they are.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    kind             TEXT NOT NULL,
    state            TEXT NOT NULL,
    request          TEXT NOT NULL,
    outcome          TEXT,
    exit_code        INTEGER,
    error            TEXT,
    summary          TEXT,
    created_ms       INTEGER NOT NULL,
    started_ms       INTEGER,
    finished_ms      INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    progress         TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, id);
";

const COLUMNS: &str =
    "id, kind, state, request, outcome, exit_code, error, created_ms, started_ms, finished_ms, attempts, progress, summary";

/// A store error, as text (the API turns it into a 500).
#[derive(Debug, thiserror::Error)]
#[error("job store: {0}")]
pub struct StoreError(String);

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError(e.to_string())
    }
}

/// How a job ended, to record.
#[derive(Debug, Clone)]
pub struct Ending {
    pub outcome: Outcome,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub summary: Option<String>,
    pub progress: Option<serde_json::Value>,
}

/// The SQLite job store.
pub struct Store {
    db: Mutex<Connection>,
}

fn parse_name<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
}

fn job_of(row: &Row<'_>) -> rusqlite::Result<Job> {
    let text = |i: usize| row.get::<_, Option<String>>(i);
    let bad = |i: usize, what: &str| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, format!("bad {what}").into())
    };
    let kind: Kind = parse_name(&row.get::<_, String>(1)?).ok_or_else(|| bad(1, "kind"))?;
    let state = State::from_name(&row.get::<_, String>(2)?).ok_or_else(|| bad(2, "state"))?;
    let request: JobRequest = serde_json::from_str(&row.get::<_, String>(3)?).map_err(|_| bad(3, "request"))?;
    Ok(Job {
        id: row.get(0)?,
        kind,
        state,
        request,
        outcome: text(4)?.and_then(|s| parse_name(&s)),
        exit_code: row.get(5)?,
        error: text(6)?,
        created_ms: row.get(7)?,
        started_ms: row.get(8)?,
        finished_ms: row.get(9)?,
        attempts: row.get(10)?,
        progress: text(11)?.and_then(|s| serde_json::from_str(&s).ok()),
        summary: text(12)?,
    })
}

impl Store {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        db.busy_timeout(std::time::Duration::from_secs(10))?;
        db.execute_batch(SCHEMA)?;
        Ok(Store { db: Mutex::new(db) })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new submission (internal state `preparing`); returns its id.
    pub fn insert(&self, kind: Kind, request: &JobRequest, now_ms: i64) -> Result<i64, StoreError> {
        let request = serde_json::to_string(request).map_err(|e| StoreError(e.to_string()))?;
        let db = self.db();
        db.execute(
            "INSERT INTO jobs (kind, state, request, created_ms) VALUES (?1, 'preparing', ?2, ?3)",
            params![crate::jobs::spelled(&kind), request, now_ms],
        )?;
        Ok(db.last_insert_rowid())
    }

    /// A prepared submission joins the queue.
    pub fn enqueue(&self, id: i64) -> Result<(), StoreError> {
        self.db().execute("UPDATE jobs SET state = 'queued' WHERE id = ?1 AND state = 'preparing'", [id])?;
        Ok(())
    }

    /// Forgets a submission that could not be prepared.
    pub fn discard(&self, id: i64) -> Result<(), StoreError> {
        self.db().execute("DELETE FROM jobs WHERE id = ?1 AND state = 'preparing'", [id])?;
        Ok(())
    }

    /// Job `id`, unless unknown (or still being submitted).
    pub fn get(&self, id: i64) -> Result<Option<Job>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1 AND state != 'preparing'");
        Ok(self.db().query_row(&sql, [id], job_of).optional()?)
    }

    /// Every job, oldest first, optionally only those in `state`.
    pub fn list(&self, state: Option<State>) -> Result<Vec<Job>, StoreError> {
        let db = self.db();
        let sql =
            format!("SELECT {COLUMNS} FROM jobs WHERE state != 'preparing' AND (?1 IS NULL OR state = ?1) ORDER BY id");
        let mut stmt = db.prepare(&sql)?;
        let jobs = stmt.query_map([state.map(State::name)], job_of)?.collect::<Result<Vec<_>, _>>()?;
        Ok(jobs)
    }

    /// Takes the oldest queued job for a worker (now running).
    pub fn claim_next(&self, now_ms: i64) -> Result<Option<Job>, StoreError> {
        let sql = format!(
            "UPDATE jobs SET state = 'running', started_ms = ?1, attempts = attempts + 1
             WHERE id = (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1)
             RETURNING {COLUMNS}"
        );
        Ok(self.db().query_row(&sql, [now_ms], job_of).optional()?)
    }

    /// Records the end of running job `id`. False when it was not running
    /// (ended already): a job ends once.
    pub fn finish(&self, id: i64, end: &Ending, now_ms: i64) -> Result<bool, StoreError> {
        let progress = end.progress.as_ref().map(|p| p.to_string());
        let n = self.db().execute(
            "UPDATE jobs SET state = ?2, outcome = ?3, exit_code = ?4, error = ?5, finished_ms = ?6,
                             progress = COALESCE(?7, progress), summary = ?8
             WHERE id = ?1 AND state = 'running'",
            params![
                id,
                end.outcome.state().name(),
                crate::jobs::spelled(&end.outcome),
                end.exit_code,
                end.error,
                now_ms,
                progress,
                end.summary
            ],
        )?;
        Ok(n == 1)
    }

    /// Saves a running job's latest progress.
    pub fn set_progress(&self, id: i64, progress: &serde_json::Value) -> Result<(), StoreError> {
        self.db().execute(
            "UPDATE jobs SET progress = ?2 WHERE id = ?1 AND state = 'running'",
            params![id, progress.to_string()],
        )?;
        Ok(())
    }

    /// Asks for job `id` to be cancelled: a queued job is cancelled at once;
    /// a running one is marked (the caller kills its process, the worker
    /// records the end). Returns the job's state before, if it exists.
    pub fn request_cancel(&self, id: i64, now_ms: i64) -> Result<Option<State>, StoreError> {
        let Some(job) = self.get(id)? else { return Ok(None) };
        let db = self.db();
        db.execute(
            "UPDATE jobs SET state = 'cancelled', outcome = 'cancelled', finished_ms = ?2,
                             error = 'cancelled before it started'
             WHERE id = ?1 AND state = 'queued'",
            params![id, now_ms],
        )?;
        db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?1 AND state = 'running'", [id])?;
        Ok(Some(job.state))
    }

    /// True when a cancel was asked for running job `id`.
    pub fn cancel_requested(&self, id: i64) -> Result<bool, StoreError> {
        let v: Option<i64> =
            self.db().query_row("SELECT cancel_requested FROM jobs WHERE id = ?1", [id], |r| r.get(0)).optional()?;
        Ok(v == Some(1))
    }

    /// Forgets final job `id`. False when it is not final (or unknown).
    pub fn delete(&self, id: i64) -> Result<bool, StoreError> {
        let n = self
            .db()
            .execute("DELETE FROM jobs WHERE id = ?1 AND state IN ('succeeded', 'failed', 'cancelled')", [id])?;
        Ok(n == 1)
    }

    /// After a restart: jobs that were running go back to the queue (or
    /// become cancelled, when a cancel was asked for); submissions that were
    /// still being prepared are dropped. Returns (requeued ids, dropped ids).
    pub fn recover(&self, now_ms: i64) -> Result<(Vec<i64>, Vec<i64>), StoreError> {
        let mut db = self.db();
        let tx = db.transaction()?;
        tx.execute(
            "UPDATE jobs SET state = 'cancelled', outcome = 'cancelled', finished_ms = ?1,
                             error = 'cancelled (the server stopped while it ran)'
             WHERE state = 'running' AND cancel_requested = 1",
            [now_ms],
        )?;
        let ids = |tx: &rusqlite::Transaction<'_>, sql: &str| -> rusqlite::Result<Vec<i64>> {
            let mut stmt = tx.prepare(sql)?;
            let v = stmt.query_map([], |r| r.get(0))?.collect();
            v
        };
        let requeued = ids(&tx, "UPDATE jobs SET state = 'queued' WHERE state = 'running' RETURNING id")?;
        let dropped = ids(&tx, "DELETE FROM jobs WHERE state = 'preparing' RETURNING id")?;
        tx.commit()?;
        Ok((requeued, dropped))
    }

    /// Forgets every job (`POST /reset`); returns their ids.
    pub fn clear(&self) -> Result<Vec<i64>, StoreError> {
        let db = self.db();
        let mut stmt = db.prepare("DELETE FROM jobs RETURNING id")?;
        let ids = stmt.query_map([], |r| r.get(0))?.collect::<Result<Vec<i64>, _>>()?;
        Ok(ids)
    }

    /// SQLite's own integrity check: "ok" when the database is sound.
    pub fn integrity_check(&self) -> Result<String, StoreError> {
        Ok(self.db().query_row("PRAGMA integrity_check", [], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (Store, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "sts-store-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (Store::open(&dir.join("jobs.sqlite")).unwrap(), dir)
    }

    fn submit(s: &Store) -> i64 {
        let id = s.insert(Kind::Fuzz, &JobRequest::fuzz("[network]"), 1).unwrap();
        s.enqueue(id).unwrap();
        id
    }

    #[test]
    fn jobs_are_claimed_in_order_and_end_once() {
        let (s, dir) = store();
        let (a, b) = (submit(&s), submit(&s));
        assert_eq!(s.claim_next(5).unwrap().map(|j| j.id), Some(a));
        assert_eq!(s.claim_next(5).unwrap().map(|j| j.id), Some(b));
        assert_eq!(s.claim_next(5).unwrap(), None);
        let end =
            Ending { outcome: Outcome::Violation, exit_code: Some(1), error: None, summary: None, progress: None };
        assert!(s.finish(a, &end, 9).unwrap());
        assert!(!s.finish(a, &end, 10).unwrap(), "a job ends once");
        let job = s.get(a).unwrap().unwrap();
        assert_eq!(
            (job.state, job.outcome, job.exit_code, job.finished_ms),
            (State::Succeeded, Some(Outcome::Violation), Some(1), Some(9))
        );
        assert_eq!(s.integrity_check().unwrap(), "ok");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_restart_requeues_running_jobs_and_drops_half_submitted_ones() {
        let (s, dir) = store();
        let running = submit(&s);
        let cancelled = submit(&s);
        let queued = submit(&s);
        s.claim_next(1).unwrap();
        s.claim_next(1).unwrap();
        s.request_cancel(cancelled, 2).unwrap();
        let half = s.insert(Kind::Fuzz, &JobRequest::fuzz(""), 3).unwrap();
        assert_eq!(s.get(half).unwrap(), None, "a submission being prepared is not visible");
        drop(s);
        let s = Store::open(&dir.join("jobs.sqlite")).unwrap();
        assert_eq!(s.recover(4).unwrap(), (vec![running], vec![half]));
        assert_eq!(s.get(running).unwrap().unwrap().state, State::Queued);
        assert_eq!(s.get(cancelled).unwrap().unwrap().state, State::Cancelled);
        assert_eq!(s.claim_next(5).unwrap().map(|j| (j.id, j.attempts)), Some((running, 2)));
        assert_eq!(s.claim_next(5).unwrap().map(|j| j.id), Some(queued));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_queued_job_cancels_at_once_and_only_final_jobs_delete() {
        let (s, dir) = store();
        let id = submit(&s);
        assert!(!s.delete(id).unwrap(), "a queued job is not deleted");
        assert_eq!(s.request_cancel(id, 2).unwrap(), Some(State::Queued));
        assert_eq!(s.get(id).unwrap().unwrap().outcome, Some(Outcome::Cancelled));
        assert_eq!(s.claim_next(3).unwrap(), None);
        assert!(s.delete(id).unwrap());
        assert_eq!(s.request_cancel(id, 4).unwrap(), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
