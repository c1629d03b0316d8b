//! A run: the mock network connected to real controllers over TCP through
//! the interposer ([`netrun`]), an experiment brought up around it
//! ([`session`]), external events resolved and injected, and the seeded
//! fuzzer ([`inputs`]), and what is observed drained into the trace and
//! checked ([`monitor`]).

pub mod inputs;
pub mod monitor;
pub mod netrun;
pub mod ovs;
pub mod session;
