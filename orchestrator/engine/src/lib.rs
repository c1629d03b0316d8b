//! `sts-engine`: the orchestrator as a library. It runs real controllers
//! against the mock network through the interposition proxy, and drives
//! pingall, fuzzing, replay, PEEK and minimization.
//!
//! It prints nothing, exits nowhere, keeps no process-wide state and starts
//! no runtime: every job takes an [`Engine`] (its observer, its pool of
//! controller snapshots, its once-only notices, its counters) and runs as an
//! `async fn` on the caller's tokio runtime. Front ends (`sts` the command
//! line, the console and the server) turn results into output and exit
//! codes.
//!
//! This file only declares and re-exports; [`Engine`] and [`RunError`] have
//! files of their own. The folders are layers, each using only those above
//! it in this list (`scripts/module-cycles` checks that no module uses one
//! that uses it):
//! - [`config`]: experiment configs (TOML); [`records`]: the checker's
//!   violations to and from the trace's records; [`observer`]: progress and
//!   notices, for whoever drives a job; [`dirlock`]: one job per directory;
//! - [`time`]: the only place time is read; virtual time
//!   ([`clock`](time::clock));
//! - [`controllers`]: controller processes (start, readiness, logs, kill,
//!   no orphans), the specs of the installed controllers, pristine snapshots
//!   (zygotes) and mid-run checkpoints through the shim, and policies
//!   (reconfiguring a controller from outside);
//! - [`run`]: the mock network connected to real controllers over TCP
//!   ([`netrun`]), bringing an experiment up ([`session`]), injecting
//!   external events and the seeded fuzzer ([`inputs`]), the trace drain and
//!   the invariant monitor ([`monitor`]);
//! - [`jobs`]: pingall, fuzz, replay, PEEK, minimize (inputs and messages),
//!   learn, campaign, import, replay on Open vSwitch, and the cluster (warm
//!   workers, their pool, Slurm allocations).
//!
//! Every module is also reachable at the crate's root (`sts_engine::replay`,
//! `crate::session`), as before the folders.
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

pub mod config;
pub mod controllers;
pub mod dirlock;
mod engine;
mod error;
pub mod jobs;
pub mod observer;
pub mod records;
pub mod run;
pub mod time;

pub(crate) use controllers::output;
pub use controllers::{checkpoint, controller, listeners, policy, presets, snapshot};
pub use jobs::{
    branches, campaign, explore, fuzz, import, internal, learn, minimize, on_ovs, peek, pingall, pool, races, replay,
    slurm, warm, worker,
};
pub use run::{inputs, monitor, netrun, ovs, session};
pub use time::clock;
pub(crate) use time::finesleep;

pub use engine::Engine;
pub use error::{own_dir, InputError, RunError};
pub use observer::{Notice, NoticeKind, Observer, Progress};
