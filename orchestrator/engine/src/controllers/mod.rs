//! Controllers as processes: starting one and knowing it is ready, its logs,
//! killing it with nothing left behind ([`controller`], `output`,
//! [`listeners`]); the installed controllers' specs ([`presets`]); pristine
//! snapshots and mid-run checkpoints through the shim ([`snapshot`],
//! [`checkpoint`]); and changing a running controller's configuration from
//! outside, as an operator would ([`policy`]).

pub mod checkpoint;
pub mod controller;
pub mod listeners;
pub(crate) mod output;
pub mod policy;
pub mod presets;
pub mod snapshot;
