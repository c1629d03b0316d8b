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

/// Why an input could not be applied, or a controller operation or policy
/// change done: what the input names that does not exist, or what went
/// wrong. Every one is the input's fault ([`RunError::BadInput`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("no host named {0:?}")]
    NoHost(String),
    #[error("no switch s{0}")]
    NoSwitch(u64),
    #[error("s{}:{} and s{}:{} are not linked in this topology", .a.switch, .a.port, .b.switch, .b.port)]
    NotLinked { a: sts_trace::Port, b: sts_trace::Port },
    #[error("no relay named {name:?} in the config's [[relays]] (there are: {})", listed(.known))]
    NoRelay { name: String, known: Vec<String> },
    #[error("no policy named {name:?} in the config's [[policies]] (there are: {})", listed(.known))]
    NoPolicy { name: String, known: Vec<String> },
    #[error("no controller named {name:?} (controllers are c0..c{})", .count.saturating_sub(1))]
    NoController { name: String, count: usize },
    #[error("no OpenFlow message type {0:?} (types go by snake_case names: flow_mod, packet_in, barrier_request ...)")]
    NoMessageType(String),
    #[error("c{0} is a remote controller: sts did not start it and cannot crash it")]
    RemoteController(usize),
    /// A controller could not be restarted, or a switch reconnected.
    #[error("{0}")]
    Restart(String),
    /// A setup step or a policy change failed (its controller's answer).
    #[error("{0}")]
    Step(String),
}

fn listed(known: &[String]) -> String {
    if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    }
}

impl From<InputError> for RunError {
    fn from(e: InputError) -> RunError {
        RunError::BadInput(e.to_string())
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
