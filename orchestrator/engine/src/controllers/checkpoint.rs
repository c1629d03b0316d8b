//! Mid-run controller checkpoints (`docs/snapshots.md`).
//!
//! A controller copy forked from a zygote on virtual time listens to sts on a
//! control socket of its own (the shim's side: `shim/src/checkpoint.rs`). At a
//! quiescent point of the run (every controller waiting, nothing in flight),
//! [`checkpoint`] makes it fork a *holder* that keeps the controller's whole
//! state; the copy carries on. [`Checkpoint::resume`] later forks the holder
//! into a new copy that continues from that state, its connections replaced by
//! fresh sockets sts hands over (one per connection the controller had, by
//! descriptor number), so sts can pair each with the switch it belonged to.
//!
//! A holder lives as long as its [`Checkpoint`]; copies resumed from it die
//! with it (PDEATHSIG), so keep the checkpoint while its copies run.
//! [`Checkpoint::take_over`] uses a checkpoint up instead: the holder itself
//! continues as the copy.

use std::io::{BufRead, BufReader, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use nix::unistd::Pid;

use crate::clock::VirtualTime;
use crate::controller::Controller;
use crate::snapshot::{CopyOutput, SnapshotError};

/// How long a controller copy may take to answer a command: it looks at its
/// control socket every millisecond of its waits, so only a busy or stuck
/// process takes long.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// A TCP connection the controller had when it was checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldConnection {
    /// The descriptor number the controller knows it by.
    pub fd: i32,
    /// The controller's port.
    pub local_port: u16,
    /// The other end's port (sts's side, for its switch connections).
    pub peer_port: u16,
}

/// A controller's state at a quiescent point, kept by a parked process.
pub struct Checkpoint {
    name: String,
    holder: Pid,
    control: BufReader<UnixStream>,
    /// The address the checkpointed copy listened on.
    listen: SocketAddr,
    aux_port: u16,
    /// The connections to hand fresh sockets for on resume.
    pub connections: Vec<HeldConnection>,
    /// A copy forked ahead for the next resume, if one was asked for.
    spare: Option<Spare>,
}

/// A copy the holder forked ahead ([`Checkpoint::prepare_spare`]): listening
/// on a port of its own, outside the run's time, waiting for the sockets of
/// the resume that will use it. The holder's `spare PID` reply is read when
/// it is used or given up.
struct Spare {
    output: CopyOutput,
    /// sts's end of the spare's control socket.
    shim: UnixStream,
    /// The clock page it was given (a resume on another clock forks anew).
    clock_fd: std::os::fd::RawFd,
}

fn err(name: &str, what: &str, e: &dyn std::fmt::Display) -> SnapshotError {
    SnapshotError::Start(format!("checkpoint of {name}: {what}: {e}"))
}

/// Checkpoints `controller`, which must be a copy on virtual time, blocked in
/// a wait (call it at a quiescent point of the run).
pub fn checkpoint(controller: &mut Controller) -> Result<Checkpoint, SnapshotError> {
    let name = controller.name().to_string();
    let (listen, aux_port) = (controller.addr(), controller.aux_port());
    let threads = std::fs::read_dir(format!("/proc/{}/task", controller.pid())).map(|d| d.count()).unwrap_or(1);
    let Some(control) = controller.shim_control() else {
        return Err(SnapshotError::NoCheckpoint(format!(
            "{name} was not forked from a snapshot on virtual time, so it cannot be checkpointed"
        )));
    };
    if threads > 1 {
        return Err(SnapshotError::NoCheckpoint(format!(
            "{name} runs {threads} threads, and fork copies only the calling one"
        )));
    }
    let (ours, theirs) = UnixStream::pair().map_err(|e| err(&name, "socketpair", &e))?;
    send(control, "checkpoint\n", &[theirs.as_raw_fd()]).map_err(|e| err(&name, "sending the command", &e))?;
    drop(theirs);
    let line = read_line(control).map_err(|e| err(&name, "reading the reply", &e))?;
    if line.starts_with("busy") {
        return Err(SnapshotError::Busy(format!("{name} has unread bytes on a connection ({})", line.trim())));
    }
    let mut words = line.split_whitespace();
    let (Some("checkpointed"), Some(pid)) = (words.next(), words.next().and_then(|p| p.parse::<i32>().ok())) else {
        return Err(err(&name, "the shim said", &line.trim()));
    };
    // The holder is a fork: it holds this controller's output pipes open.
    controller.mark_checkpointed();
    let mut connections = Vec::new();
    for w in words {
        let parts: Vec<&str> = w.split(':').collect();
        let parsed = match parts.as_slice() {
            [fd, l, p] => fd
                .parse()
                .ok()
                .zip(l.parse().ok())
                .zip(p.parse().ok())
                .map(|((fd, local_port), peer_port)| HeldConnection { fd, local_port, peer_port }),
            _ => None,
        };
        connections.push(parsed.ok_or_else(|| err(&name, "a connection in the reply", &w))?);
    }
    ours.set_read_timeout(Some(ANSWER_WITHIN)).map_err(|e| err(&name, "socket", &e))?;
    Ok(Checkpoint {
        name,
        holder: Pid::from_raw(pid),
        control: BufReader::new(ours),
        listen,
        aux_port,
        connections,
        spare: None,
    })
}

impl Checkpoint {
    /// The address the checkpointed copy listened on (its resumed copies
    /// listen elsewhere).
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// The parked process's id.
    pub fn holder_pid(&self) -> u32 {
        self.holder.as_raw() as u32
    }

    /// A new copy continuing from the checkpoint, on `clock`, with its output
    /// in `log_path`. `sockets` gives, for each held connection's descriptor,
    /// the fresh connected socket to put in its place; connections left out
    /// stay shared with the holder (do not use them).
    pub fn resume(
        &mut self,
        log_path: &Path,
        clock: &VirtualTime,
        sockets: Vec<(i32, OwnedFd)>,
    ) -> Result<Controller, SnapshotError> {
        self.copy("resume", "resumed", log_path, clock, sockets)
    }

    /// [`Checkpoint::resume`] for the last time: the holder itself becomes
    /// the copy (no fork), so the checkpoint is used up. Cheaper by a fork of
    /// the whole controller and the copy-on-write faults after it (PEEK rolls
    /// back to each checkpoint once).
    pub fn take_over(
        mut self,
        log_path: &Path,
        clock: &VirtualTime,
        sockets: Vec<(i32, OwnedFd)>,
    ) -> Result<Controller, SnapshotError> {
        let copy = self.copy("take", "took", log_path, clock, sockets);
        if copy.is_ok() {
            // The holder is the copy now: dropping the checkpoint must not kill it.
            self.holder = Pid::from_raw(0);
        }
        copy
    }

    /// Has the holder fork a copy now for the next [`Checkpoint::resume`]
    /// on `clock`, which then only hands it its sockets: the fork (a
    /// page-table copy of the whole controller) and the copy's first steps
    /// happen beside whatever runs now instead of on the resume's path.
    /// Returns without waiting for the holder. Does nothing if a spare is
    /// ready already.
    pub fn prepare_spare(&mut self, clock: &VirtualTime) -> Result<(), SnapshotError> {
        if self.spare.is_some() {
            return Ok(());
        }
        let (output, shim) = self.command_copy("spare 0\n", clock, &[])?;
        self.spare = Some(Spare { output, shim, clock_fd: clock.fd() });
        Ok(())
    }

    /// Sends the holder `command` with a new copy's descriptors (its output
    /// pipes, `clock`'s page, its control socket, then `sockets`), without
    /// waiting for the answer. Returns sts's ends: the output and the
    /// copy's control socket.
    fn command_copy(
        &mut self,
        command: &str,
        clock: &VirtualTime,
        sockets: &[std::os::fd::RawFd],
    ) -> Result<(CopyOutput, UnixStream), SnapshotError> {
        let e = |what: &str, x: &dyn std::fmt::Display| err(&self.name, what, x);
        let output = CopyOutput::new().map_err(|x| e("pipe", &x))?;
        let (shim, theirs) = UnixStream::pair().map_err(|x| e("socketpair", &x))?;
        let mut fds = output.theirs().to_vec();
        fds.extend([clock.fd(), theirs.as_raw_fd()]);
        fds.extend_from_slice(sockets);
        send(self.control.get_mut(), command, &fds).map_err(|x| err(&self.name, "sending the command", &x))?;
        Ok((output, shim))
    }

    /// The holder's answer `ANSWER PID` to a command (`spare`, `resumed`,
    /// `took`): the new copy's pid.
    fn holder_answer(&mut self, answer: &str) -> Result<u32, SnapshotError> {
        let mut line = String::new();
        self.control.read_line(&mut line).map_err(|x| err(&self.name, "reading the reply", &x))?;
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            [word, pid] if *word == answer => pid.parse().map_err(|x| err(&self.name, "the reply", &x)),
            _ => Err(err(&self.name, "the holder said", &line.trim())),
        }
    }

    /// Gives the spare up, if there is one: it exits when its control
    /// socket closes (and dies with the holder anyway).
    fn drop_spare(&mut self) {
        if let Some(spare) = self.spare.take() {
            let pid = self.holder_answer("spare");
            drop(spare);
            if let Ok(pid) = pid {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }

    /// The spare as a copy resumed on `sockets`: `Ok(Err(sockets))` when it
    /// cannot be used before they were handed over (resume the usual way).
    fn go(
        &mut self,
        spare: Spare,
        log_path: &Path,
        sockets: Vec<(i32, OwnedFd)>,
    ) -> Result<Result<Controller, Vec<(i32, OwnedFd)>>, SnapshotError> {
        let name = self.name.clone();
        let pid = match self.holder_answer("spare") {
            Ok(pid) => pid,
            Err(x) => {
                tracing::debug!("{name}: no spare copy ({x}); forking one");
                return Ok(Err(sockets));
            }
        };
        let Spare { output, shim, .. } = spare;
        let mut copy = match output.adopt(&name, pid, self.listen, self.aux_port, log_path, Some(shim)) {
            Ok(copy) => copy,
            Err(x) => {
                tracing::debug!("{name}: the spare copy {pid} cannot be used ({x}); forking one");
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                return Ok(Err(sockets));
            }
        };
        let targets: Vec<String> = sockets.iter().map(|(t, _)| t.to_string()).collect();
        let fds: Vec<i32> = sockets.iter().map(|(_, s)| s.as_raw_fd()).collect();
        let Some(control) = copy.shim_control() else {
            return Ok(Err(sockets));
        };
        if let Err(x) = send(control, &format!("go {}\n", targets.join(" ")), &fds) {
            tracing::debug!("{name}: the spare copy {pid} took no sockets ({x}); forking one");
            return Ok(Err(sockets));
        }
        drop(sockets);
        let line = read_line(control).map_err(|x| err(&name, "the spare copy's answer", &x))?;
        if line.trim() != "went" {
            return Err(err(&name, "the spare copy said", &line.trim()));
        }
        Ok(Ok(copy))
    }

    /// Sends `verb` (`resume` or `take`) and adopts the copy the holder
    /// answers `answer PID` for.
    fn copy(
        &mut self,
        verb: &str,
        answer: &str,
        log_path: &Path,
        clock: &VirtualTime,
        sockets: Vec<(i32, OwnedFd)>,
    ) -> Result<Controller, SnapshotError> {
        let mut sockets = sockets;
        let ready = self.spare.as_ref().is_some_and(|s| s.clock_fd == clock.fd());
        if verb == "resume" && ready {
            let spare = self.spare.take().expect("a spare ready");
            match self.go(spare, log_path, sockets)? {
                Ok(copy) => return Ok(copy),
                Err(back) => sockets = back,
            }
        } else {
            // The holder answers in order: its reply to `spare` first.
            self.drop_spare();
        }
        let targets: Vec<String> = sockets.iter().map(|(t, _)| t.to_string()).collect();
        let fds: Vec<i32> = sockets.iter().map(|(_, s)| s.as_raw_fd()).collect();
        // Port 0: every listener moves, as in a fork.
        let command = format!("{verb} 0 {}\n", targets.join(" "));
        let (output, shim) = self.command_copy(&command, clock, &fds)?;
        drop(sockets);
        let pid = self.holder_answer(answer)?;
        output
            .adopt(&self.name, pid, self.listen, self.aux_port, log_path, Some(shim))
            .map_err(|x| err(&self.name, "the resumed copy", &x))
    }
}

impl Drop for Checkpoint {
    fn drop(&mut self) {
        // Closing the socket ends the holder; make sure of it (unless it
        // took over: it is a controller copy now, killed as one).
        if self.holder.as_raw() > 0 {
            let _ = kill(self.holder, Signal::SIGKILL);
        }
    }
}

fn send(to: &mut UnixStream, command: &str, fds: &[i32]) -> nix::Result<usize> {
    let iov = [IoSlice::new(command.as_bytes())];
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(to.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
}

/// One reply line from a copy's control socket, within [`ANSWER_WITHIN`].
fn read_line(from: &mut UnixStream) -> std::io::Result<String> {
    from.set_read_timeout(Some(ANSWER_WITHIN))?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        // Byte by byte: the socket is not ours to buffer past the reply.
        match std::io::Read::read(from, &mut byte) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the controller closed its control socket (did it exit?)",
                ))
            }
            Ok(_) if byte[0] == b'\n' => return Ok(String::from_utf8_lossy(&line).into_owned()),
            Ok(_) => line.push(byte[0]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("no answer within {ANSWER_WITHIN:?} (is the controller on virtual time, and waiting?)"),
                ))
            }
            Err(e) => return Err(e),
        }
    }
}
