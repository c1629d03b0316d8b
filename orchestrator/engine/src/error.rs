//! [`RunError`]: why a job could not complete, sorted as the front ends' exit
//! codes need (bad input, the environment, a trace that does not reproduce).

/// Why a run could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Environment(String),
    /// The trace's own run does not show its violation when replayed:
    /// nothing to minimize (exit 5).
    #[error("{0}")]
    DoesNotReproduce(String),
}

impl RunError {
    /// True when the input (config, trace, arguments) is at fault rather
    /// than the environment.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, RunError::Config(_) | RunError::BadInput(_))
    }
}

/// Makes `dir` a directory of the experiment's own
/// ([`sts_trace::dir::own_dir`]): a symbolic link there is bad input, any
/// other failure the environment's.
pub fn own_dir(dir: &std::path::Path) -> Result<(), RunError> {
    sts_trace::dir::own_dir(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => RunError::BadInput(e.to_string()),
        _ => RunError::Environment(format!("{}: {e}", dir.display())),
    })
}
