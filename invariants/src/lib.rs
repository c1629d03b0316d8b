//! `sts-invariants`: predicates over the mock network's forwarding state
//! (loops, blackholes, reachability, isolation, controller liveness).
//!
//! Laid out by the workspace foundation; the checks arrive with the invariants work.

pub use sts_mocknet as mocknet;
