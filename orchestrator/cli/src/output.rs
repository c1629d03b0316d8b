//! Standard output that a closed pipe cannot break: `sts replay DIR | head`
//! must not panic (as `println!` does on EPIPE) nor stop the command half
//! way (its controllers must still be stopped and its files written). Once
//! the reader is gone, further output is dropped and the command carries on.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static READER_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output; a closed pipe silences all later output.
pub fn write(args: std::fmt::Arguments) {
    if READER_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            READER_GONE.store(true, Ordering::Relaxed);
        } else {
            tracing::warn!("cannot write to standard output: {e}");
        }
    }
}

/// `println!`, through [`write`].
macro_rules! outln {
    () => { $crate::output::write(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!`, through [`write`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write(format_args!($($arg)*)) };
}
