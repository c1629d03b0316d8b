//! `sts-mocknet`: the simulated network that real controllers talk to.
//!
//! Switches (OpenFlow agents with flow tables), hosts, links and dataplane
//! forwarding live here as plain, cloneable Rust data. The crate is laid out by
//! the workspace foundation and filled in by the mock-network work; until then
//! it only re-exports the codec it will speak.

pub use sts_proxy::wire;
