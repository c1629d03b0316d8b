//! The jobs a front end runs, each on a [`crate::Engine`]: [`pingall`],
//! [`fuzz`], [`replay`] (and the console's stepping), [`peek`],
//! [`minimize`] (inputs, its candidates replayed from [`warm`] places) and [`internal`] (messages), [`learn`] (fingerprint
//! masks), [`campaign`] (many seeds, bugs grouped), [`import`] (a recording
//! of real switches), [`on_ovs`] (a trace on real Open vSwitch), and the
//! cluster: [`worker`] (a warm `sts worker`), [`pool`] (work handed to
//! workers), [`slurm`] (an allocation whose tasks run the workers).

pub mod branches;
pub mod campaign;
pub mod explore;
pub mod fuzz;
pub mod import;
pub mod internal;
pub mod learn;
pub mod minimize;
pub mod on_ovs;
pub mod peek;
pub mod pingall;
pub mod pool;
pub mod races;
pub mod replay;
pub mod slurm;
pub mod warm;
pub mod worker;
