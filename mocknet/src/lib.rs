//! `sts-mocknet`: the simulated network that real controllers talk to.
//!
//! - [`packet`]: header fields of frames, rewriting, builders;
//! - [`flow`]: flow tables and FLOW_MOD semantics, one model for 1.0 and 1.3;
//! - [`switch`]: the OpenFlow agent and forwarding pipeline of one switch;
//! - [`host`]: end hosts (ARP, ICMP echo);
//! - [`topology`]: layouts (linear, star, mesh, tree, fat-tree);
//! - [`network`]: everything wired together, and the dataplane.
//!
//! The crate does no I/O and reads no clock: callers pass messages, frames and
//! the current time in, and get messages and frames out. The network is plain
//! data, so a checkpoint is a `clone()`.

pub mod flow;
pub mod host;
pub mod network;
pub mod packet;
pub mod switch;
pub mod topology;

pub use network::{DataplaneEvent, Endpoint, Network, Recipient, ToController};
pub use topology::Topology;
