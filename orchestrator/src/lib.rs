//! The sts orchestrator: runs real controllers against the mock network through
//! the interposition proxy, and drives fuzzing, replay and minimization.
//!
//! Modules, by job:
//! - [`controller`]: controller processes (start, readiness, logs, kill, no orphans);
//! - [`presets`]: ready-made specs for the controllers `scripts/setup` installs;
//! - [`cli`]: the `sts` command line (brief §8).
//!
//! See `ARCHITECTURE.md` at the workspace root for how the pieces fit.

pub mod cli;
pub mod controller;
pub mod presets;
