//! The sts orchestrator: runs real controllers against the mock network through
//! the interposition proxy, and drives fuzzing, replay and minimization.
//!
//! Modules, by job:
//! - [`cli`]: the `sts` command line (brief §8);
//! - [`config`]: experiment configs (TOML);
//! - [`clock`]: the only place time is read;
//! - [`checkpoint`]: mid-run controller checkpoints (fork a holder, resume copies);
//! - [`controller`]: controller processes (start, readiness, logs, kill, no orphans);
//! - [`presets`]: ready-made specs for the controllers `scripts/setup` installs;
//! - [`experiment`]: experiment directories (config, meta, trace, logs, violation);
//! - [`fuzz`]: the `sts fuzz` command;
//! - [`minimize`]: the `sts minimize` command (ddmin, validity rules, resume, jobs);
//! - [`peek`]: PEEK, by prefix replay or with checkpoints;
//! - [`replay`]: the `sts replay` command (happens-before waits, divergence);
//! - [`trace`]: the trace format (versioned JSON Lines), writer and reader;
//! - [`inputs`]: external events: injecting them, and the seeded fuzzer;
//! - [`netrun`]: the mock network connected to real controllers over TCP;
//! - [`observe`]: what a run observes: facts for the checker, the trace drain, the invariant monitor;
//! - [`session`]: bringing an experiment up (controllers, network, handshakes);
//! - [`pingall`]: the `sts pingall` command;
//! - [`standalone`]: the `sts proxy` command (real switches ⇄ a controller).
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

pub mod checkpoint;
pub mod cli;
pub mod clock;
pub mod config;
pub mod controller;
pub mod experiment;
pub mod fuzz;
pub mod inputs;
pub mod minimize;
pub mod netrun;
pub mod observe;
pub mod pingall;
pub mod peek;
pub mod presets;
pub mod replay;
pub mod session;
pub mod snapshot;
pub mod standalone;
pub mod trace;
