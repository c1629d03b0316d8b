//! A controller's output: what it writes to stdout and stderr, copied into
//! its log file and turned into [`LogLine`] events.
//!
//! A thread per pipe copies lines as they come, so the pipe never fills and
//! the log file is current even when nothing observes the run. But an
//! observation cannot rely on that thread alone: on virtual time a replay can
//! run from a controller's last write to its end in almost no real time, and
//! on a loaded machine the thread may not have been scheduled since the
//! write. A replay then ended without the traceback it was looking for (a
//! suite test failed that way in CI). So [`Output::take_lines`] also reads
//! each pipe itself, to its current end, under the lock the thread reads
//! under: every byte written before that read is either still in the pipe or
//! already copied, and either way among the lines returned. "Observed" means
//! "written before the observation", whatever the scheduler did.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sts_invariants::identity::mask_numbers;

/// Which output stream a controller log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line a controller wrote: an internal event (a coarse view of
/// the controller's state transitions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub stream: Stream,
    pub line: String,
    /// The line with every token that contains a digit masked (numbers,
    /// addresses, times, ids), so equivalent lines match across runs.
    pub fingerprint: String,
}

/// Lines a controller may write before they are taken ([`Output::take_lines`]);
/// later lines still reach the log file but are not queued as events.
pub const MAX_UNREAD_LINES: usize = 65_536;

/// A controller's output pipes (stdout and stderr).
pub(crate) struct Output {
    pipes: Vec<Arc<Pipe>>,
}

/// One pipe's read end and what has been read from it.
struct Pipe {
    stream: Stream,
    /// Non-blocking: whoever holds `state` reads until the pipe is empty.
    fd: OwnedFd,
    state: Mutex<Copied>,
}

struct Copied {
    log: File,
    /// The start of a line whose newline has not been read yet.
    partial: Vec<u8>,
    /// Whole lines not yet taken.
    lines: Vec<LogLine>,
    /// The write end is closed everywhere and everything was read.
    eof: bool,
}

impl Output {
    /// Copies `stdout` and `stderr` (read ends of the controller's pipes)
    /// into `log`, each with a thread of its own.
    pub(crate) fn start(stdout: OwnedFd, stderr: OwnedFd, log: File) -> std::io::Result<Output> {
        let pipes = vec![
            Arc::new(Pipe::new(Stream::Stdout, stdout, log.try_clone()?)?),
            Arc::new(Pipe::new(Stream::Stderr, stderr, log)?),
        ];
        for pipe in &pipes {
            let pipe = pipe.clone();
            let spawned = std::thread::Builder::new().name("sts-controller-log".into()).spawn(move || pipe.follow());
            if let Err(e) = spawned {
                // Observations still read the pipe; only the log file lags.
                tracing::warn!("cannot start a thread for controller output: {e}");
            }
        }
        Ok(Output { pipes })
    }

    /// No output to follow (a controller sts did not start).
    pub(crate) fn none() -> Output {
        Output { pipes: Vec::new() }
    }

    /// The lines the controller wrote since the last call, in order per
    /// stream: every line it finished writing before this call.
    pub(crate) fn take_lines(&self) -> Vec<LogLine> {
        let mut out = Vec::new();
        for pipe in &self.pipes {
            let mut copied = pipe.read_available();
            out.append(&mut copied.lines);
        }
        out
    }

    /// Reads whatever is left; true once every pipe reached end of file
    /// (the controller and every process sharing its pipes are gone).
    pub(crate) fn read_to_end(&self) -> bool {
        self.pipes.iter().all(|p| p.read_available().eof)
    }
}

impl Pipe {
    fn new(stream: Stream, fd: OwnedFd, log: File) -> std::io::Result<Pipe> {
        let flags = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
        fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        let state = Mutex::new(Copied { log, partial: Vec::new(), lines: Vec::new(), eof: false });
        Ok(Pipe { stream, fd, state })
    }

    /// The copying thread: waits for bytes, copies them, until end of file.
    fn follow(&self) {
        loop {
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    tracing::warn!("controller output: poll: {e}");
                    return;
                }
            }
            if self.read_available().eof {
                return;
            }
        }
    }

    /// Reads the pipe until it is empty (or closed), under the lock: the
    /// bytes go to the log file, whole lines onto the queue.
    fn read_available(&self) -> MutexGuard<'_, Copied> {
        // A thread that panicked while copying left consistent enough state.
        let mut copied = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = [0u8; 65_536];
        while !copied.eof {
            match nix::unistd::read(self.fd.as_raw_fd(), &mut buf) {
                Ok(0) => {
                    // The last line may lack its newline: it is a line all the same.
                    if !copied.partial.is_empty() {
                        let last = std::mem::take(&mut copied.partial);
                        copied.push(self.stream, &last);
                    }
                    copied.eof = true;
                }
                Ok(n) => copied.add(self.stream, &buf[..n]),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => break,
                Err(e) => {
                    tracing::warn!("controller output: read: {e}");
                    copied.eof = true;
                }
            }
        }
        copied
    }
}

impl Copied {
    fn add(&mut self, stream: Stream, bytes: &[u8]) {
        let _ = self.log.write_all(bytes);
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                self.push(stream, &rest[..end]);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&rest[..end]);
                self.push(stream, &line);
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
    }

    fn push(&mut self, stream: Stream, raw: &[u8]) {
        // Never block the controller on an unread queue: the file has every line.
        if self.lines.len() >= MAX_UNREAD_LINES {
            return;
        }
        let line = String::from_utf8_lossy(raw).trim_end_matches('\r').to_string();
        self.lines.push(LogLine { stream, fingerprint: mask_numbers(&line), line });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test's log.
    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sts-output-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn pipe_into(log: &std::path::Path) -> (Arc<Pipe>, File) {
        let (read, write) = nix::unistd::pipe().unwrap();
        let pipe = Pipe::new(Stream::Stderr, read, File::create(log).unwrap()).unwrap();
        (Arc::new(pipe), File::from(write))
    }

    /// The root cause of a suite flake, held deterministically: the copying
    /// thread has not run since the controller wrote (here it never runs).
    /// Taking lines must still return everything written before the call.
    #[test]
    fn lines_written_before_a_take_are_taken_though_no_thread_copied_them() {
        let dir = scratch("unthreaded");
        let (pipe, mut writer) = pipe_into(&dir.join("log"));
        let output = Output { pipes: vec![pipe] };
        writer
            .write_all(b"Traceback (most recent call last):\n  File \"app.py\", line 26\nKeyError: (1, 2)\n")
            .unwrap();
        let lines: Vec<String> = output.take_lines().into_iter().map(|l| l.line).collect();
        assert_eq!(lines, ["Traceback (most recent call last):", "  File \"app.py\", line 26", "KeyError: (1, 2)"]);
        assert!(output.take_lines().is_empty(), "each line is taken once");
    }

    #[test]
    fn split_writes_join_into_lines_and_the_last_line_needs_no_newline() {
        let dir = scratch("split");
        let log = dir.join("log");
        let (pipe, mut writer) = pipe_into(&log);
        let output = Output { pipes: vec![pipe] };
        writer.write_all(b"swi").unwrap();
        assert!(output.take_lines().is_empty(), "half a line is not a line yet");
        writer.write_all(b"tch 0x1a up\r\nport 3 down\nbye").unwrap();
        let lines: Vec<String> = output.take_lines().into_iter().map(|l| l.line).collect();
        assert_eq!(lines, ["switch 0x1a up", "port 3 down"]);
        assert!(!output.read_to_end(), "the writer is still open");
        drop(writer);
        assert!(output.read_to_end());
        let last: Vec<String> = output.take_lines().into_iter().map(|l| l.line).collect();
        assert_eq!(last, ["bye"]);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "switch 0x1a up\r\nport 3 down\nbye");
    }

    #[test]
    fn the_thread_copies_into_the_log_while_nobody_takes_lines() {
        let dir = scratch("threads");
        let log = dir.join("log");
        let (out_r, out_w) = nix::unistd::pipe().unwrap();
        let (err_r, err_w) = nix::unistd::pipe().unwrap();
        let output = Output::start(out_r, err_r, File::create(&log).unwrap()).unwrap();
        File::from(out_w).write_all(b"one\n").unwrap();
        File::from(err_w).write_all(b"two\n").unwrap();
        // Both writers are closed: the threads reach end of file on their own.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(&log).unwrap().len() < 8 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("one\n") && text.contains("two\n"), "{text:?}");
        assert!(output.read_to_end());
        let mut lines: Vec<(Stream, String)> = output.take_lines().into_iter().map(|l| (l.stream, l.line)).collect();
        lines.sort_by_key(|(s, _)| *s == Stream::Stderr);
        assert_eq!(lines, [(Stream::Stdout, "one".to_string()), (Stream::Stderr, "two".to_string())]);
    }
}
