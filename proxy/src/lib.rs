//! `sts-proxy`: how sts speaks and overhears OpenFlow.
//!
//! - [`wire`]: the OpenFlow 1.0 and 1.3 codec: framing, typed messages that
//!   re-encode byte for byte, raw pass-through of anything not understood, and
//!   fingerprints for matching events across runs.
//!
//! - [`interpose`]: the interposition channel: every message recorded as an
//!   internal event (with its fingerprint) and delivered by policy: pass, hold
//!   until released, delay, drop, or reorder on request.
//!
//! - [`relay`]: a plain TCP relay between controller peers that can be
//!   blocked and healed (partitions).
//!
//! - [`standalone`]: the interposition between *real* switches and a
//!   controller (`sts proxy`), recorded as JSON Lines.
//!
//! See `ARCHITECTURE.md` at the workspace root.

pub mod interpose;
pub mod relay;
pub mod standalone;
pub mod wire;
