//! Time: the only place it is read ([`clock`]: real or virtual, the jump
//! log), how sts hears that a controller entered a wait ([`announce`]), the
//! kernel's network queues the idle test reads ([`kernelq`]) and
//! sub-millisecond sleeps ([`finesleep`]) pacing its retries.

pub(crate) mod announce;
pub mod clock;
pub(crate) mod finesleep;
pub(crate) mod kernelq;
