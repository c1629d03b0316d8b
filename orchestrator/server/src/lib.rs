//! `sts-server`: `sts serve`, an HTTP API (axum on hyper) and a durable job
//! queue (SQLite) for QA testbeds and batch minimization.
//!
//! - [`store`]: the job store; every state change is committed before it is
//!   acted on, and a restart requeues what was running;
//! - [`jobs`]: a job's directory (its inputs, its experiment, its log) and
//!   the `sts` command line it runs;
//! - [`upload`]: files a submission brings, kept inside the job directory;
//! - [`worker`]: workers running jobs as `sts` child processes;
//! - [`proxies`]: standalone OpenFlow proxies managed over the API;
//! - [`api`], [`index`], [`openapi`]: the routes, the web index, the
//!   OpenAPI description.
//!
//! The wire types live in `sts-client`, which the tests use to drive a real
//! server. `docs/api.md` is the user's guide.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub mod api;
pub mod door;
pub mod files;
pub mod index;
pub mod jobs;
pub mod listener;
pub mod openapi;
pub mod proxies;
pub mod reserve;
pub mod store;
pub mod upload;
pub mod worker;

/// How to run the server.
#[derive(Debug, Clone)]
pub struct Options {
    pub listen: SocketAddr,
    /// The data directory: `jobs.sqlite`, `jobs/ID/`, `experiments/`.
    pub data: PathBuf,
    /// Jobs run at once.
    pub workers: usize,
    /// The token every request must carry (`Authorization: Bearer TOKEN`);
    /// `None`: the data directory's (`DATA/token`, made at the first start).
    pub token: Option<String>,
    /// Names besides loopback's and the listening address that `Host` may carry.
    pub allow_hosts: Vec<String>,
    /// Browser origins whose pages may call the API (none by default).
    pub allow_origins: Vec<String>,
    /// The `sts` executable that runs jobs.
    pub sts: PathBuf,
    /// Where jobs run.
    pub executor: Executor,
}

/// Where a server's jobs run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Executor {
    /// As child processes of the server.
    #[default]
    Local,
    /// As Slurm jobs (`srun`), in `partition` or the default one; the data
    /// directory must be on storage every node shares.
    Slurm { partition: Option<String> },
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Environment(String),
}

/// What a started server tells its caller.
#[derive(Debug, Clone)]
pub struct Started {
    /// The address it listens on (the port filled in when 0 was asked).
    pub addr: SocketAddr,
    /// Jobs the previous run left running, queued again.
    pub requeued: Vec<i64>,
    /// The data directory's token file, when the token is that one (not the caller's).
    pub token_file: Option<PathBuf>,
    /// The token, when this start made it (shown once, then only in its file).
    pub new_token: Option<String>,
}

/// Takes `DATA/serve.lock` ([`sts_engine::dirlock`]: held while the server
/// runs, released by the kernel however it ends); a second server gets a
/// bad-input error naming the holder.
fn lock_data_dir(data: &std::path::Path) -> Result<sts_engine::dirlock::DirLock, ServeError> {
    let path = data.join("serve.lock");
    sts_engine::dirlock::take(&path).map_err(|e| match e {
        sts_engine::dirlock::Refused::Held { pid } => ServeError::BadInput(format!(
            "the data directory {} is in use by another sts serve{}: one server per data directory",
            data.display(),
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        )),
        sts_engine::dirlock::Refused::Io(e) => ServeError::Environment(format!("{}: {e}", path.display())),
    })
}

/// Processes working in `dir` (a job's `sts` and its controllers run in
/// their job's directory).
fn processes_in(dir: &std::path::Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let cwd = std::fs::read_link(e.path().join("cwd")).ok()?;
            cwd.starts_with(dir).then_some(pid)
        })
        .collect()
}

/// Waits until the jobs of a server that was killed are gone (they die with
/// it, but dying takes a moment), so that a job run again does not meet its
/// previous attempt (a minimization's lock). Kills what is left after 10 s.
async fn outlive_previous_jobs(jobs: &std::path::Path) {
    let Ok(jobs) = jobs.canonicalize() else { return };
    for _ in 0..200 {
        if processes_in(&jobs).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for pid in processes_in(&jobs) {
        tracing::warn!("process {pid} of a previous run still works in {}: killing it", jobs.display());
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Runs the server until `shutdown` resolves; `started` is called once it
/// listens. On shutdown, running jobs' processes are killed and their jobs
/// stay `running` in the store, to run again at the next start.
pub async fn serve(
    opts: Options,
    started: impl FnOnce(&Started),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if opts.token.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(ServeError::BadInput("the token is empty".into()));
    }
    if opts.workers == 0 {
        return Err(ServeError::BadInput("--workers must be at least 1".into()));
    }
    let env = |what: &str, e: &dyn std::fmt::Display| ServeError::Environment(format!("{what}: {e}"));
    if opts.data.exists() && !opts.data.is_dir() {
        return Err(ServeError::BadInput(format!("--data {}: not a directory", opts.data.display())));
    }
    std::fs::create_dir_all(opts.data.join("jobs")).map_err(|e| env(&opts.data.display().to_string(), &e))?;
    // One server per data directory: a second would run the first's jobs again and lose their results.
    let _lock = lock_data_dir(&opts.data)?;
    let (token, token_file, new_token) = match opts.token.clone() {
        Some(t) => (t, None, None),
        None => {
            let (t, made) = door::data_token(&opts.data).map_err(|e| match e {
                door::TokenError::Bad(..) => ServeError::BadInput(e.to_string()),
                door::TokenError::Io(..) => ServeError::Environment(e.to_string()),
            })?;
            let shown = made.then(|| t.clone());
            (t, Some(opts.data.join("token")), shown)
        }
    };
    let store = store::Store::open(&opts.data.join("jobs.sqlite")).map_err(|e| env("opening the job store", &e))?;
    let (requeued, dropped) =
        store.recover(sts_engine::clock::unix_time_ms()).map_err(|e| env("recovering the job store", &e))?;
    // Submissions a previous run was still preparing were never answered.
    let _ = std::fs::remove_dir_all(opts.data.join("staging"));
    for id in dropped {
        let _ = std::fs::remove_dir_all(jobs::job_dir(&opts.data, id));
    }
    if !requeued.is_empty() {
        if opts.executor != Executor::Local {
            // The killed server's Slurm jobs may run on: they go before their jobs run again.
            for &id in &requeued {
                worker::cancel_slurm_job(id);
            }
        }
        outlive_previous_jobs(&opts.data.join("jobs")).await;
    }
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| env(&format!("listening on {}", opts.listen), &e))?;
    let addr = listener.local_addr().map_err(|e| env("listening", &e))?;
    let shared = Arc::new(worker::Shared::new(opts.data.clone(), store, opts.sts.clone(), opts.executor.clone()));
    let workers: Vec<_> = (0..opts.workers).map(|_| tokio::spawn(worker::work(shared.clone()))).collect();
    let proxies = Arc::new(proxies::Proxies::new(opts.data.join("proxies")));
    let door = door::Door::new(token.trim().to_string(), addr, &opts.allow_hosts, &opts.allow_origins);
    let app = api::App { shared: shared.clone(), proxies: proxies.clone(), door: Arc::new(door) };
    started(&Started { addr, requeued, token_file, new_token });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // Open connections (an event stream, idle clients) get a moment to end.
    let server = tokio::spawn(listener::run(listener, api::router(app), stop_rx, Duration::from_secs(2)));
    shutdown.await;
    shared.stop();
    proxies.clear().await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(3), server).await;
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    Ok(())
}
