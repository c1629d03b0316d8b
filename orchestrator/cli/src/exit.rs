//! Exit codes: the one place where outcomes become them (listed in `sts --help`).
//!
//! 0 success or nothing found; 1 a violation found (or not every pair
//! reachable); 2 bad input (config, trace, arguments), with a message naming
//! file, line and field; 3 the environment failed (a controller did not
//! start, a port was taken); 4 (fuzz) a violation present before the first
//! input: the network was never healthy, so no input caused it; 5
//! (minimize) the original trace does not reproduce its violation, so there
//! is nothing to minimize.

use sts_engine::RunError;

pub const OK: u8 = 0;
pub const VIOLATION: u8 = 1;
pub const BAD_INPUT: u8 = 2;
pub const ENVIRONMENT: u8 = 3;
pub const PRESENT_FROM_START: u8 = 4;
pub const DOES_NOT_REPRODUCE: u8 = 5;

/// The exit code of a job that failed.
pub fn of_error(e: &RunError) -> u8 {
    if matches!(e, RunError::DoesNotReproduce(_)) {
        DOES_NOT_REPRODUCE
    } else if e.is_bad_input() {
        BAD_INPUT
    } else {
        ENVIRONMENT
    }
}

/// 1 when something was found, else 0.
pub fn found(found: bool) -> u8 {
    if found {
        VIOLATION
    } else {
        OK
    }
}
