//! `sts-proxy`: how sts speaks and overhears OpenFlow.
//!
//! - [`wire`]: the OpenFlow 1.0 and 1.3 codec: framing, typed messages that
//!   re-encode byte for byte, raw pass-through of anything not understood, and
//!   fingerprints for matching events across runs.
//!
//! The interposition channel (record, hold, release, delay, drop, reorder)
//! builds on this crate's codec; see `ARCHITECTURE.md` at the workspace root.

pub mod wire;
