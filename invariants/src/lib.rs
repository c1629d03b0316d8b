//! `sts-invariants`: checks over the mock network's forwarding state.
//!
//! - [`header`]: header space as wildcard cubes (exact emptiness, witnesses);
//! - [`walk`]: symbolic forwarding of whole cubes through flow tables, groups,
//!   ports and links, mirroring the mock dataplane;
//! - [`classes`]: header space cut into classes no rule tells apart;
//! - `by_class`: the pair checks one header class at a time, shared by every
//!   source (the fast path when nothing rewrites headers);
//! - [`check`]: the invariants (loops, blackholes, reachability, isolation,
//!   liveness, controller errors) and their violations with witnesses;
//! - [`identity`]: bug identity (victim, culprit) and the levels of sameness;
//! - [`persist`]: transient versus persistent violations;
//! - [`stanford`]: real router networks (the Stanford backbone's format) as a
//!   mock network, and their rule updates;
//! - [`testnet`]: generated networks with realistic routing (benchmarks, tests).

mod by_class;
pub mod check;
pub mod classes;
pub mod header;
pub mod identity;
pub mod persist;
pub mod stanford;
pub mod testnet;
pub mod verify;
pub mod walk;

pub use check::{Checker, Engine, Incremental, Invariant, Violation};
pub use identity::Same;
pub use persist::Persistence;
