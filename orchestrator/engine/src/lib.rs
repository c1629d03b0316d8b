//! `sts-engine`: the orchestrator as a library. It runs real controllers
//! against the mock network through the interposition proxy, and drives
//! pingall, fuzzing, replay, PEEK and minimization.
//!
//! It prints nothing, exits nowhere, keeps no process-wide state and starts
//! no runtime: every job takes an [`Engine`] (its observer, its pool of
//! controller snapshots, its once-only notices, its counters) and runs as an
//! `async fn` on the caller's tokio runtime. Front ends (`sts` the command
//! line, and later the console and the server) turn results into output and
//! exit codes.
//!
//! This file only declares and re-exports; [`Engine`] and [`RunError`] have
//! files of their own.
//!
//! Modules, by job:
//! - [`config`]: experiment configs (TOML);
//! - [`clock`]: the only place time is read; virtual time;
//! - [`controller`], [`presets`]: controller processes (start, readiness,
//!   logs, kill, no orphans) and the specs of the installed controllers;
//! - [`snapshot`], [`checkpoint`]: pristine snapshots (zygotes) and mid-run
//!   checkpoints of controllers, through the shim;
//! - [`netrun`]: the mock network connected to real controllers over TCP;
//! - [`session`]: bringing an experiment up (relays, controllers, network,
//!   handshakes);
//! - [`monitor`]: facts for the checker, the trace drain, the invariant monitor;
//! - [`inputs`]: external events: injecting them, and the seeded fuzzer;
//! - [`pingall`], [`fuzz`], [`replay`], [`peek`], [`minimize`], [`campaign`]:
//!   the jobs;
//! - [`slurm`]: the Slurm executor (candidates as job steps) and array jobs;
//! - [`records`]: the checker's violations to and from the trace's records;
//! - [`observer`]: progress and notices, for whoever drives a job.
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

pub mod campaign;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod controller;
mod engine;
mod error;
mod finesleep;
pub mod fuzz;
pub mod import;
pub mod inputs;
pub mod internal;
pub mod learn;
pub mod listeners;
pub mod minimize;
pub mod monitor;
pub mod netrun;
pub mod observer;
mod output;
pub mod peek;
pub mod pingall;
pub mod policy;
pub mod presets;
pub mod records;
pub mod replay;
pub mod session;
pub mod slurm;
pub mod snapshot;

pub use engine::Engine;
pub use error::{own_dir, InputError, RunError};
pub use observer::{Notice, NoticeKind, Observer, Progress};
