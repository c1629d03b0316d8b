//! `sts-invariants`: checks over the mock network's forwarding state.
//!
//! - [`header`]: header space as wildcard cubes (exact emptiness, witnesses);
//! - [`walk`]: symbolic forwarding of whole cubes through flow tables, groups,
//!   ports and links, mirroring the mock dataplane;
//! - [`check`]: the invariants (loops, blackholes, reachability, isolation,
//!   liveness, controller errors) and their violations with witnesses;
//! - [`persist`]: transient versus persistent violations.

pub mod check;
pub mod header;
pub mod persist;
pub mod walk;

pub use check::{Checker, Invariant, Violation};
pub use persist::Persistence;
