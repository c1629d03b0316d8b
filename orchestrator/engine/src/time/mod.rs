//! Time: the only place it is read ([`clock`]: real or virtual, the jump
//! log) and sub-millisecond sleeps ([`finesleep`]) pacing the idle test.

pub mod clock;
pub(crate) mod finesleep;
