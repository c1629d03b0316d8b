//! Experiment directories: everything needed to repeat a run.
//!
//! ```text
//! DIR/config.toml     the config as used (verbatim), with the files it names
//!                     (relative .py apps, a topology file) copied beside it
//! DIR/meta.json       seed, sts version, controller commands, host
//! DIR/trace.jsonl     the trace (docs/trace-format.md), written as the run goes
//! DIR/logs/           one log file per controller, plus generated controller configs
//! DIR/violation.json  the violation that stopped the run, if any
//! DIR/replays/N/      each replay's trace and logs (sts replay)
//! ```
//!
//! Files other than the trace are written atomically (a temporary file, then
//! a rename), and the trace is flushed line by line, so a run killed half-way
//! leaves a readable directory.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}.tmp", path.extension().and_then(|e| e.to_str()).unwrap_or("")));
    // A failed write (a full disk) leaves neither a cut file nor its .tmp.
    let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Writes `value` as pretty JSON to `path` atomically.
pub fn write_json(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    write_atomic(path, format!("{text}\n").as_bytes())
}

/// Makes `path` (and its parents) a directory of the experiment's own: a
/// symbolic link there is refused (`InvalidInput`), so that nothing sts
/// writes into `replays/`, `mcs/`, `logs/` or `report/` lands where a link
/// points, outside the experiment.
pub fn own_dir(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is a symbolic link: sts writes only into the experiment's own directories (replace it by a directory)",
                path.display()
            ),
        ));
    }
    std::fs::create_dir_all(path)
}

/// An experiment directory.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub dir: PathBuf,
}

/// Why an experiment directory cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("{0}: already holds an experiment (trace.jsonl); choose another directory or remove it")]
    Exists(PathBuf),
    #[error(
        "{0}: already holds files ({1}); choose a new or empty directory, so that nothing of yours is overwritten"
    )]
    NotEmpty(PathBuf, String),
    #[error("{0}: exists and is not a directory; choose another")]
    NotADirectory(PathBuf),
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// What `meta.json` records about a run.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub sts: String,
    pub seed: u64,
    pub controllers: Vec<ControllerMeta>,
    pub host: String,
}

/// One controller's command line, as started.
#[derive(Debug, Clone, Serialize)]
pub struct ControllerMeta {
    pub name: String,
    pub command: Vec<String>,
}

impl Experiment {
    /// Opens an existing directory (for replay and minimization).
    pub fn open(dir: &Path) -> Experiment {
        Experiment { dir: dir.to_owned() }
    }

    /// Creates `dir` for a new run and writes the config text into it.
    pub fn create(dir: &Path, config_text: &str) -> Result<Experiment, CreateError> {
        let io = |e| CreateError::Io(dir.to_owned(), e);
        if dir.exists() && !dir.is_dir() {
            return Err(CreateError::NotADirectory(dir.to_owned()));
        }
        if dir.join("trace.jsonl").exists() {
            return Err(CreateError::Exists(dir.to_owned()));
        }
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut names: Vec<String> =
                entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            if !names.is_empty() {
                names.sort();
                let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
                let more = if names.len() > 3 { format!(" and {} more", names.len() - 3) } else { String::new() };
                return Err(CreateError::NotEmpty(dir.to_owned(), shown + &more));
            }
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        own_dir(&dir.join("logs")).map_err(io)?;
        let exp = Experiment { dir: dir.to_owned() };
        write_atomic(&exp.config(), config_text.as_bytes()).map_err(io)?;
        Ok(exp)
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn meta(&self) -> PathBuf {
        self.dir.join("meta.json")
    }
    pub fn trace(&self) -> PathBuf {
        self.dir.join("trace.jsonl")
    }
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    pub fn violation(&self) -> PathBuf {
        self.dir.join("violation.json")
    }
    /// The directory of replay number `n` (from 1).
    pub fn replay(&self, n: u32) -> PathBuf {
        self.dir.join("replays").join(n.to_string())
    }
}

/// Copies files a config names (relative .py apps, a topology file: pairs of
/// path relative to the config and where the file is now) into `dir`, at the
/// same relative paths, so a config copied into `dir` finds them there.
pub fn copy_config_files(files: Vec<(PathBuf, PathBuf)>, dir: &Path) -> std::io::Result<()> {
    for (relative, source) in files {
        let target = dir.join(&relative);
        if target.exists() && std::fs::canonicalize(&target)? == std::fs::canonicalize(&source)? {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let bytes =
            std::fs::read(&source).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", source.display())))?;
        write_atomic(&target, &bytes)?;
    }
    Ok(())
}

/// This machine's name, for `meta.json`.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
