//! A job's directory and its command line.
//!
//! ```text
//! DATA/jobs/ID/input/     what the submission brought (config, files, upload)
//! DATA/jobs/ID/run/       the experiment directory the job's `sts` writes
//! DATA/jobs/ID/log.txt    everything the job's `sts` printed, attempt by attempt
//! DATA/jobs/ID/junit.xml  the job's result as JUnit XML
//! ```
//!
//! Replay and minimize jobs work on a copy of their experiment (taken at
//! submission), so that two jobs never write into one directory and a
//! source job can be deleted without breaking the jobs made from it.

use std::path::{Path, PathBuf};

use sts_client::{JobRequest, Kind, Outcome};

use crate::upload::{self, UploadError};

/// Why a submission cannot become a job (a 4xx, except `Io`).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error("{0}")]
    Request(String),
    #[error(transparent)]
    Upload(#[from] UploadError),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Io(String),
}

/// The directory of job `id`.
pub fn job_dir(data: &Path, id: i64) -> PathBuf {
    data.join("jobs").join(id.to_string())
}

/// The experiment directory of job `id`.
pub fn run_dir(data: &Path, id: i64) -> PathBuf {
    job_dir(data, id).join("run")
}

/// The config file of a fuzz job, relative to `input/`.
fn config_name(req: &JobRequest) -> &str {
    req.config_file.as_deref().unwrap_or("config.toml")
}

/// Checks what a request asks for before anything is written.
pub fn validate(req: &JobRequest, has_upload: bool) -> Result<Kind, PrepareError> {
    let bad = |s: &str| Err(PrepareError::Request(s.to_string()));
    let Some(kind) = req.kind else {
        return bad("`kind` is required: fuzz, replay, minimize or campaign");
    };
    // The same bounds as a tar upload's and the command line's, whichever way the files come.
    if req.files.len() > upload::MAX_FILES {
        return Err(PrepareError::Request(format!("`files`: more than {} files", upload::MAX_FILES)));
    }
    let inline: u64 = req.files.values().chain(req.config.iter()).map(|t| t.len() as u64).sum();
    if inline > upload::MAX_UNPACKED_BYTES {
        return Err(PrepareError::Request(format!(
            "`files` and `config` hold more than {} MiB",
            upload::MAX_UNPACKED_BYTES >> 20
        )));
    }
    if let Some(c) = req.config.as_ref().filter(|c| c.len() as u64 > sts_engine::config::MAX_TEXT_FILE) {
        return Err(PrepareError::Request(format!(
            "`config`: {} bytes, more than the {} a config may have",
            c.len(),
            sts_engine::config::MAX_TEXT_FILE
        )));
    }
    let fuzz_only = req.config.is_some() || req.config_file.is_some();
    let experiment = req.from_job.is_some() || req.experiment.is_some();
    match kind {
        Kind::Fuzz | Kind::Campaign => {
            if experiment {
                return bad(
                    "fuzz and campaign jobs take a config (`config` or `config_file`), not `from_job` or `experiment`",
                );
            }
            if kind == Kind::Campaign {
                match &req.seeds {
                    None => return bad("a campaign needs `seeds`, as `A..B` (inclusive)"),
                    Some(s) => {
                        sts_engine::campaign::parse_seeds(s)
                            .map_err(|e| PrepareError::Request(format!("`seeds` {e}")))?;
                    }
                }
            }
            match (&req.config, &req.config_file) {
                (Some(_), Some(_)) => {
                    return bad("give `config` (the text) or `config_file` (an uploaded file), not both")
                }
                (None, None) => {
                    return bad("a fuzz job needs `config` (TOML text) or `config_file` (a file in the upload)")
                }
                (None, Some(_)) if !has_upload && !req.files.contains_key(config_name(req)) => {
                    return bad("`config_file` names a file of the upload, but nothing was uploaded")
                }
                _ => {}
            }
        }
        Kind::Replay | Kind::Minimize => {
            if fuzz_only || !req.files.is_empty() {
                return bad(
                    "replay and minimize jobs take an experiment (`from_job`, `experiment` or an upload), not a config",
                );
            }
            if req.from_job.is_some() && (req.experiment.is_some() || has_upload) {
                return bad("give `from_job` or an experiment (`experiment`, an upload), not both");
            }
            if !experiment && !has_upload {
                return bad(
                    "a replay or minimize job needs `from_job`, `experiment`, or an uploaded experiment directory",
                );
            }
        }
    }
    let opt = |set: bool, name: &str, kinds: &[Kind]| -> Result<(), PrepareError> {
        if set && !kinds.contains(&kind) {
            let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
            return Err(PrepareError::Request(format!("`{name}` is an option of {} jobs", names.join(" and "))));
        }
        Ok(())
    };
    opt(req.repeat.is_some(), "repeat", &[Kind::Replay])?;
    opt(req.expect.is_some(), "expect", &[Kind::Replay])?;
    opt(req.same.is_some(), "same", &[Kind::Replay, Kind::Minimize, Kind::Campaign])?;
    opt(req.replays.is_some(), "replays", &[Kind::Minimize, Kind::Campaign])?;
    opt(req.final_replays.is_some(), "final_replays", &[Kind::Minimize, Kind::Campaign])?;
    opt(req.budget_s.is_some(), "budget_s", &[Kind::Minimize, Kind::Campaign])?;
    opt(req.seeds.is_some(), "seeds", &[Kind::Campaign])?;
    opt(req.jobs.is_some(), "jobs", &[Kind::Campaign])?;
    if req.jobs.is_some_and(|n| !(1..=64).contains(&n)) {
        return bad("`jobs` must be between 1 and 64");
    }
    opt(req.peek.is_some(), "peek", &[Kind::Minimize])?;
    if req.repeat.is_some_and(|n| !(1..=1000).contains(&n)) {
        return bad("`repeat` must be between 1 and 1000");
    }
    if req.replays.is_some_and(|n| !(1..=100).contains(&n)) {
        return bad("`replays` must be between 1 and 100");
    }
    if req.budget_s.is_some_and(|n| !(1..=sts_engine::minimize::MAX_BUDGET_S).contains(&n)) {
        let most = sts_engine::minimize::MAX_BUDGET_S;
        return Err(PrepareError::Request(format!("`budget_s` must be between 1 and {most} (ten years)")));
    }
    if req.final_replays.is_some_and(|n| n > 1000) {
        return bad("`final_replays` must be at most 1000");
    }
    Ok(kind)
}

/// Where a submission is prepared before it has an id: a rejected one
/// leaves no trace in the store (and uses up no id).
pub fn staging_dir(data: &Path, n: u64) -> PathBuf {
    data.join("staging").join(n.to_string())
}

/// Writes a job's inputs into `dir` (a staging directory, renamed to the
/// job's once it has an id): the inline files and the upload under
/// `input/`, and for replay and minimize a copy of the experiment under
/// `run/`. `source_run` is the experiment of `from_job`.
pub fn prepare(
    dir: &Path,
    data: &Path,
    req: &JobRequest,
    upload: Option<&[u8]>,
    source_run: Option<&Path>,
) -> Result<(), PrepareError> {
    let input = dir.join("input");
    std::fs::create_dir_all(&input).map_err(|e| PrepareError::Io(format!("{}: {e}", input.display())))?;
    if let Some(bytes) = upload {
        upload::unpack_tar(&input, bytes)?;
    }
    for (name, text) in &req.files {
        upload::write_file(&input, name, text.as_bytes())?;
    }
    match req.kind {
        Some(Kind::Fuzz | Kind::Campaign) => {
            if let Some(text) = &req.config {
                upload::write_file(&input, "config.toml", text.as_bytes())?;
            }
            let path = input.join(upload::safe_relative(config_name(req))?);
            let text = sts_engine::config::read_text_file(&path)
                .map_err(|e| PrepareError::Request(format!("config {}: {e}", config_name(req))))?;
            // The engine's own validation, with line numbers, before queueing.
            sts_engine::config::Config::from_toml(&text, &path)
                .map_err(|e| PrepareError::Request(e.to_string().replace(&format!("{}/", input.display()), "")))?;
        }
        Some(Kind::Replay | Kind::Minimize) => {
            let source = match (source_run, &req.experiment, upload) {
                (Some(run), _, _) => run.to_path_buf(),
                (None, Some(exp), Some(_)) => input.join(upload::safe_relative(exp)?),
                (None, None, Some(_)) => input.clone(),
                (None, Some(exp), None) => data.join("experiments").join(upload::safe_relative(exp)?),
                (None, None, None) => return Err(PrepareError::Request("no experiment given".into())),
            };
            if !source.join("trace.jsonl").is_file() {
                let shown = source.strip_prefix(data).unwrap_or(&source).display().to_string();
                return Err(PrepareError::NotFound(format!("{shown}: no experiment there (no trace.jsonl)")));
            }
            copy_experiment(&source, &dir.join("run")).map_err(|e| PrepareError::Io(e.to_string()))?;
        }
        None => return Err(PrepareError::Request("`kind` is required".into())),
    }
    Ok(())
}

/// Copies an experiment directory, leaving out what replay and minimize
/// write (replays, an MCS, the report) and anything not a regular file or
/// directory.
fn copy_experiment(from: &Path, to: &Path) -> std::io::Result<()> {
    fn copy(from: &Path, to: &Path, top: bool) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        let mut entries: Vec<_> = std::fs::read_dir(from)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            let kind = e.file_type()?;
            if top && ["replays", "mcs", "report"].iter().any(|s| name == *s) {
                continue;
            }
            if kind.is_dir() {
                copy(&e.path(), &to.join(&name), false)?;
            } else if kind.is_file() {
                std::fs::copy(e.path(), to.join(&name))?;
            }
        }
        Ok(())
    }
    copy(from, to, true)
}

/// The `sts` arguments that run job `id` (in its directory).
pub fn command_line(req: &JobRequest) -> Vec<String> {
    let mut args: Vec<String> = vec!["--progress".into(), "json".into()];
    let mut options: Vec<(&str, Option<String>)> = Vec::new();
    match req.kind {
        Some(Kind::Fuzz) | None => {
            args.extend(["fuzz".into(), "--config".into(), format!("input/{}", config_name(req))]);
            args.extend(["--out".into(), "run".into()]);
        }
        Some(Kind::Campaign) => {
            args.extend(["campaign".into(), "--config".into(), format!("input/{}", config_name(req))]);
            args.extend(["--out".into(), "run".into()]);
            options.push(("--seeds", req.seeds.clone()));
            options.push(("--jobs", req.jobs.map(|n| n.to_string())));
            options.push(("--replays", req.replays.map(|n| n.to_string())));
            options.push(("--final-replays", req.final_replays.map(|n| n.to_string())));
            options.push(("--budget", req.budget_s.map(|n| n.to_string())));
            options.push(("--same", req.same.as_ref().map(spelled)));
        }
        Some(Kind::Replay) => {
            args.extend(["replay".into(), "run".into()]);
            options.push(("--repeat", req.repeat.map(|n| n.to_string())));
            options.push(("--expect", req.expect.as_ref().map(spelled)));
            options.push(("--same", req.same.as_ref().map(spelled)));
        }
        Some(Kind::Minimize) => {
            args.extend(["minimize".into(), "run".into()]);
            options.push(("--replays", req.replays.map(|n| n.to_string())));
            options.push(("--final-replays", req.final_replays.map(|n| n.to_string())));
            options.push(("--budget", req.budget_s.map(|n| n.to_string())));
            options.push(("--peek", req.peek.as_ref().map(spelled)));
            options.push(("--same", req.same.as_ref().map(spelled)));
        }
    }
    for (flag, value) in options {
        if let Some(v) = value {
            args.extend([flag.to_string(), v]);
        }
    }
    args.extend(["--junit".into(), "junit.xml".into()]);
    args
}

/// Clears what an interrupted attempt left that the next must not reuse: a
/// fuzz starts again from its seed; a replay's runs start again; a
/// minimization keeps `run/mcs/state.json` and resumes.
pub fn reset_for_retry(data: &Path, id: i64, kind: Kind) -> std::io::Result<()> {
    let run = run_dir(data, id);
    let gone = |p: PathBuf| match std::fs::remove_dir_all(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    match kind {
        Kind::Fuzz | Kind::Campaign => gone(run),
        Kind::Replay => gone(run.join("replays")),
        Kind::Minimize => Ok(()),
    }
}

/// What finished job `id` found, in a line, from the files its `sts` wrote.
pub fn summarize(data: &Path, id: i64, kind: Kind, outcome: Outcome) -> Option<String> {
    let run = run_dir(data, id);
    let read = |p: PathBuf| -> Option<serde_json::Value> { serde_json::from_slice(&std::fs::read(p).ok()?).ok() };
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    match kind {
        Kind::Fuzz => match read(run.join("violation.json")) {
            Some(v) => Some(format!("{}: {}", text(&v["invariant"])?, text(&v["summary"])?)),
            None => (outcome == Outcome::Ok).then(|| "no persistent violation".to_string()),
        },
        Kind::Replay => {
            let v = read(run.join("replays").join("summary.json"))?;
            let runs = v["runs"].as_array()?.len();
            Some(format!("reproduced in {} of {runs} replay(s)", v["reproduced"].as_u64()?))
        }
        Kind::Campaign => {
            let v = read(run.join("summary.json"))?;
            let seeds = v["seeds"].as_array()?;
            let found = seeds.iter().filter(|s| !s["violation"].is_null()).count();
            let bugs = v["bugs"].as_array()?;
            let sizes: Vec<String> = bugs
                .iter()
                .map(|b| match b["mcs"]["mcs_inputs"].as_u64() {
                    Some(n) => format!("{} ({n} inputs)", b["identity"].as_str().unwrap_or("?")),
                    None => format!("{} (not minimized)", b["identity"].as_str().unwrap_or("?")),
                })
                .collect();
            Some(format!(
                "{} seeds, {found} found a violation, {} distinct bug(s){}{}",
                seeds.len(),
                bugs.len(),
                if sizes.is_empty() { "" } else { ": " },
                sizes.join("; ")
            ))
        }
        Kind::Minimize => {
            let v = read(run.join("mcs").join("report.json"))?;
            Some(format!(
                "minimal causal sequence: {} of {} inputs ({} replays); reproduced in {} of {} final replays",
                v["mcs_inputs"].as_u64()?,
                v["original_inputs"].as_u64()?,
                v["replays"].as_u64()?,
                v["final_reproduced"].as_u64()?,
                v["final_replays"].as_u64()?
            ))
        }
    }
}

/// A unit enum's name as the API, the store and the command line spell it
/// (its JSON name).
pub fn spelled<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_client::{Peek, Same};

    #[test]
    fn requests_are_checked_before_anything_is_written() {
        assert!(validate(&JobRequest::default(), false).is_err());
        assert!(validate(&JobRequest::fuzz("x"), false).is_ok());
        let mut r = JobRequest::minimize_of(3);
        assert!(validate(&r, false).is_ok());
        r.repeat = Some(2);
        assert!(validate(&r, false).unwrap_err().to_string().contains("`repeat` is an option of replay jobs"));
        let mut r = JobRequest::fuzz("x");
        r.from_job = Some(1);
        assert!(validate(&r, false).is_err());
        let r = JobRequest { kind: Some(Kind::Replay), ..JobRequest::default() };
        assert!(validate(&r, false).is_err());
        assert!(validate(&r, true).is_ok(), "an uploaded experiment");
    }

    #[test]
    fn command_lines_spell_options_as_the_cli_does() {
        let mut r = JobRequest::minimize_of(3);
        r.peek = Some(Peek::Checkpoints);
        r.same = Some(Same::Victim);
        r.final_replays = Some(0);
        assert_eq!(
            command_line(&r).join(" "),
            "--progress json minimize run --final-replays 0 --peek checkpoints --same victim --junit junit.xml"
        );
        assert_eq!(
            command_line(&JobRequest::fuzz("x")).join(" "),
            "--progress json fuzz --config input/config.toml --out run --junit junit.xml"
        );
    }
}
