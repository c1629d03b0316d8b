//! The sts orchestrator: runs real controllers against the mock network through
//! the interposition proxy, and drives fuzzing, replay and minimization.
//!
//! Modules, by job:
//! - [`cli`]: the `sts` command line (brief §8);
//! - [`config`]: experiment configs (TOML);
//! - [`clock`]: the only place time is read;
//! - [`controller`]: controller processes (start, readiness, logs, kill, no orphans);
//! - [`presets`]: ready-made specs for the controllers `scripts/setup` installs;
//! - [`netrun`]: the mock network connected to real controllers over TCP;
//! - [`observe`]: facts for the invariant checker (liveness, events, logs);
//! - [`pingall`]: the `sts pingall` command;
//! - [`standalone`]: the `sts proxy` command (real switches ⇄ a controller).
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

pub mod cli;
pub mod clock;
pub mod config;
pub mod controller;
pub mod netrun;
pub mod observe;
pub mod pingall;
pub mod presets;
pub mod standalone;
