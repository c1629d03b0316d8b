//! Mid-run checkpoints (`docs/snapshots.md`).
//!
//! A copy forked from a zygote may get a *control socket* of its own with its
//! `fork` command. While the copy waits on virtual time, the shim looks at that
//! socket between the chunks of every wait ([`poll`]), so sts can talk to a
//! controller that is blocked in its event loop. sts only does so when the
//! whole run is quiescent (every process waiting, nothing in flight), and the
//! commands are:
//!
//! - `checkpoint`, with one descriptor (the holder's control socket): the copy
//!   lists its connected TCP sockets and forks. The child, the *holder*, keeps
//!   the controller's whole state at this point and serves `resume` commands
//!   on the socket it was given, never returning into the controller. The
//!   copy replies `checkpointed HOLDER FD:LOCAL:PEER ...` and carries on.
//!   If a connection still has unread bytes, it forks nothing and replies
//!   `busy FD BYTES` (not quiescent after all; sts lets it read and retries).
//! - `resume PORT FD...` (to a holder), with the new copy's stdout, stderr, a
//!   report pipe, the clock page, its control socket, then one fresh connected
//!   socket per `FD` listed: the holder forks a copy that `dup2`s each fresh
//!   socket onto the descriptor number the controller knows, gets a fresh
//!   listener for PORT and fresh epoll instances (as a zygote's copy does),
//!   and returns into the controller's wait as if nothing happened. Because
//!   the checkpoint was quiescent, every stream restarts at a message
//!   boundary. The holder replies `resumed PID`.
//! - `take PORT FD...` (to a holder), with the same descriptors as `resume`:
//!   the holder itself becomes that copy, without a fork, and replies
//!   `took PID` (its own). For a checkpoint used once (PEEK rolls back to
//!   each checkpoint once): it saves a fork of the whole process, and the
//!   copy-on-write faults that follow one, since the copy that ran on from
//!   the checkpoint is killed and its pages become the holder's alone again.
//!
//! - `spare PORT` (to a holder), with the descriptors of `resume` but no
//!   sockets: the holder forks a copy ahead of the resume that will use it,
//!   which gets its fresh listener, reports, and waits outside the run's time
//!   for `go FD...` with the fresh sockets on its own control socket. It
//!   then does the rest of a resume and answers `went`. The holder replies
//!   `spare PID`. The fork and the copy's first steps are then off the path
//!   of the rollback that uses it (a minimization's warm place).
//!
//! A holder exits when its control socket closes (sts dropped the checkpoint
//! or died); copies it resumed die with it (PDEATHSIG). A holder that took
//! over has no parent of sts's to die with, so it exits as soon as it sees
//! its control socket close (at once in an epoll or poll wait, within a
//! chunk in a `select`).

use std::collections::BTreeSet;
use std::ffi::c_int;
use std::io::Write;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;

/// This copy's control socket, or -1.
static CONTROL: AtomicI32 = AtomicI32::new(-1);

/// Set in a holder that took over (`take`): sts letting go of its control
/// socket means sts is gone, and this process must not outlive it.
static EXIT_WHEN_RELEASED: AtomicBool = AtomicBool::new(false);

/// Whether this process ends when sts lets go of its control socket (a
/// holder that took over) or carries on (a forked copy, which dies with its
/// parent anyway).
pub fn exit_when_released(yes: bool) {
    EXIT_WHEN_RELEASED.store(yes, Ordering::Release);
}

/// Makes `fd` this process's control socket (closing any previous one).
pub fn set_control(fd: RawFd) {
    let old = CONTROL.swap(fd, Ordering::AcqRel);
    // Out of every epoll instance first: a registration outlives the
    // descriptor while another process (a fork) holds the socket.
    let mut watched = watched();
    if old >= 0 {
        type EpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
        for &epfd in watched.iter() {
            // SAFETY: libc's epoll_ctl removing our own socket; a null event
            // is allowed for EPOLL_CTL_DEL.
            unsafe { real!("epoll_ctl", EpollCtl)(epfd, libc::EPOLL_CTL_DEL, old, std::ptr::null_mut()) };
        }
    }
    watched.clear();
    drop(watched);
    if old >= 0 && old != fd {
        crate::close_ours(&[old]);
    }
}

/// Closes this process's copy of the control socket without touching the
/// epoll instances: in a holder, which shares them with the copy that goes
/// on (whose registration of the same socket they hold) until it takes over
/// or resumes a copy, which rebuilds them.
fn leave_control() {
    let old = CONTROL.swap(-1, Ordering::AcqRel);
    watched().clear();
    if old >= 0 {
        crate::close_ours(&[old]);
    }
}

/// The `data` of the control socket's event in a controller's epoll
/// instance: never handed to the controller.
const CONTROL_EVENT: u64 = u64::from_le_bytes(*b"sts-ctl!");

/// The epoll instances the control socket is registered in.
static WATCHED: Mutex<BTreeSet<RawFd>> = Mutex::new(BTreeSet::new());

fn watched() -> std::sync::MutexGuard<'static, BTreeSet<RawFd>> {
    // A poisoned lock only means a panic elsewhere; the set is still usable.
    WATCHED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers the control socket in epoll instance `epfd` (once), so that a
/// command ends a wait on it at once instead of at the end of its chunk.
pub fn watch_from(epfd: RawFd) {
    let fd = CONTROL.load(Ordering::Acquire);
    if fd < 0 || !watched().insert(epfd) {
        return;
    }
    type EpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: CONTROL_EVENT };
    // SAFETY: libc's epoll_ctl on the controller's instance and our own
    // socket, with an event of ours (not tracked: copies rebuild their
    // instances without it, and register their own socket).
    unsafe { real!("epoll_ctl", EpollCtl)(epfd, libc::EPOLL_CTL_ADD, fd, &mut event) };
}

/// Runs a `poll`-style wait on the caller's `n` descriptors at `fds` with
/// this process's control socket added (if it has one), so that a command
/// ends the wait at once; the caller sees only its own descriptors and
/// their events. `wait(fds, n)` is the real call.
///
/// # Safety
///
/// `fds` must point to `n` pollfds (poll's contract).
pub unsafe fn with_control_pollfd(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    mut wait: impl FnMut(*mut libc::pollfd, libc::nfds_t) -> c_int,
) -> c_int {
    let control = CONTROL.load(Ordering::Acquire);
    if control < 0 || fds.is_null() && n > 0 {
        return wait(fds, n);
    }
    let theirs: &mut [libc::pollfd] = if n == 0 {
        &mut []
    } else {
        // SAFETY: `n` pollfds at `fds` (this function's contract).
        unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
    };
    let mut all = Vec::with_capacity(theirs.len() + 1);
    all.extend_from_slice(theirs);
    all.push(libc::pollfd { fd: control, events: libc::POLLIN, revents: 0 });
    let r = wait(all.as_mut_ptr(), n + 1);
    if r < 0 {
        return r;
    }
    for (mine, copy) in theirs.iter_mut().zip(&all) {
        mine.revents = copy.revents;
    }
    r - c_int::from(all[theirs.len()].revents != 0)
}

/// An epoll instance is closed: its number may come back as another one.
pub fn forget_epoll(epfd: RawFd) {
    watched().remove(&epfd);
}

/// Takes the control socket's event out of the `n` events at `events` (an
/// epoll wait's result) and returns how many are left for the controller.
///
/// # Safety
///
/// `events` must point to `n` (if positive) initialised events.
pub unsafe fn strip_control_event(events: *mut libc::epoll_event, n: c_int) -> c_int {
    if n <= 0 {
        return n;
    }
    // SAFETY: `n` initialised events at `events` (this function's contract).
    let list = unsafe { std::slice::from_raw_parts_mut(events, n as usize) };
    let mut kept = 0;
    for i in 0..list.len() {
        let data = list[i].u64;
        if data != CONTROL_EVENT {
            list[kept] = list[i];
            kept += 1;
        }
    }
    kept as c_int
}

/// True if sts may send commands to this process.
pub fn listening() -> bool {
    CONTROL.load(Ordering::Acquire) >= 0
}

pub(crate) fn reply(fd: RawFd, line: &str) {
    let line = format!("{line}\n");
    // SAFETY: writing a valid buffer to a descriptor we own.
    unsafe { libc::send(fd, line.as_ptr().cast(), line.len(), libc::MSG_NOSIGNAL) };
}

fn close_all(fds: &[RawFd]) {
    crate::close_ours(fds);
}

/// Handles a command waiting on the control socket, if any. Called between
/// the chunks of a virtual wait; returns true if something happened that
/// changes the process's identity (it is now a resumed copy: a new pid and a
/// new clock slot), so the caller re-reads its slot.
///
/// # Safety
///
/// The process must have a single thread (a checkpoint forks).
pub unsafe fn poll() -> bool {
    let fd = CONTROL.load(Ordering::Acquire);
    if fd < 0 {
        return false;
    }
    let (command, fds) = match crate::receive(fd, libc::MSG_DONTWAIT) {
        crate::Received::Nothing => return false,
        crate::Received::Closed => {
            if EXIT_WHEN_RELEASED.load(Ordering::Acquire) {
                // SAFETY: a holder that took over, whose sts is gone (see
                // EXIT_WHEN_RELEASED): it ends at once, as a copy would with
                // its zygote.
                unsafe { libc::_exit(0) };
            }
            // sts let go of this copy: it carries on, uncommanded.
            set_control(-1);
            return false;
        }
        crate::Received::Command(c, f) => (c, f),
    };
    match command.split_whitespace().next() {
        // SAFETY: single-threaded, this function's contract.
        Some("checkpoint") if fds.len() == 1 => unsafe { checkpoint(fd, fds[0]) },
        _ => {
            close_all(&fds);
            reply(
                fd,
                &format!(
                    "error expected `checkpoint` with one descriptor, got {:?} with {}",
                    command.trim(),
                    fds.len()
                ),
            );
            false
        }
    }
}

/// Connected TCP sockets: (descriptor, local port, peer port).
fn connected_tcp_sockets() -> Vec<(RawFd, u16, u16)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    let mut fds: Vec<RawFd> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    fds.sort_unstable();
    let mut out = Vec::new();
    for fd in fds {
        // SAFETY: stat is a plain C struct, valid all zero; fstat and
        // getsockopt only write into our own values, within their sizes.
        let stream_socket = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            let mut ty: c_int = 0;
            let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
            libc::fstat(fd, &mut st) == 0
                && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
                && libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, (&mut ty as *mut c_int).cast(), &mut len) == 0
                && ty == libc::SOCK_STREAM
        };
        if !stream_socket {
            continue;
        }
        let (Some(local), Some(peer)) = (crate::socket_port(fd, false), crate::socket_port(fd, true)) else { continue };
        out.push((fd, local, peer));
    }
    out
}

/// Forks a holder that keeps this state; replies with its pid and the
/// connections sts must replace on resume.
///
/// # Safety
///
/// The process must have a single thread (it forks).
unsafe fn checkpoint(control: RawFd, holder_control: RawFd) -> bool {
    let conns = connected_tcp_sockets();
    // Bytes waiting in a connection would be lost to every copy resumed on a
    // fresh socket: the point is not quiescent after all. sts tries again.
    for &(fd, _, _) in &conns {
        let mut waiting: c_int = 0;
        // SAFETY: FIONREAD writes one c_int, ours.
        if unsafe { libc::ioctl(fd, libc::FIONREAD, &mut waiting) } == 0 && waiting > 0 {
            close_all(&[holder_control]);
            reply(control, &format!("busy {fd} {waiting}"));
            return false;
        }
    }
    // SAFETY: single-threaded (this function's contract), so the holder is a
    // whole copy of the process.
    let pid = unsafe { crate::shim_fork() };
    if pid == 0 {
        // The holder: not part of the copy's group (sts kills that), and
        // not commanded through the copy's socket.
        // SAFETY: setpgid on ourselves has no memory effects.
        unsafe { libc::setpgid(0, 0) };
        leave_control();
        // SAFETY: the holder is single-threaded too (a fork copies one thread).
        unsafe { hold(holder_control) };
        // Only a resumed copy gets here.
        return true;
    }
    // The holder leaves the copy's group itself too, but may not have run yet
    // when sts kills the copy's group: both sides set it, whoever runs first.
    if pid > 0 {
        // SAFETY: setpgid on our own child has no memory effects.
        unsafe { libc::setpgid(pid, pid) };
    }
    close_all(&[holder_control]);
    if pid < 0 {
        reply(control, &format!("error fork: {}", std::io::Error::last_os_error()));
        return false;
    }
    let list: Vec<String> = conns.iter().map(|(fd, l, p)| format!("{fd}:{l}:{p}")).collect();
    reply(control, format!("checkpointed {pid} {}", list.join(" ")).trim_end());
    false
}

/// The holder: serves `resume` until its socket closes. Returns only in a
/// resumed copy.
///
/// # Safety
///
/// The process must have a single thread (it forks copies).
unsafe fn hold(control: RawFd) {
    // SAFETY: getpid has no preconditions.
    let holder = unsafe { libc::getpid() };
    let old_chld = crate::reap_children_automatically();
    loop {
        let (command, fds) = match crate::receive(control, 0) {
            crate::Received::Command(c, f) => (c, f),
            // SAFETY: sts dropped the checkpoint: the holder ends, with
            // nothing to flush.
            _ => unsafe { libc::_exit(0) },
        };
        let words: Vec<&str> = command.split_whitespace().collect();
        let port: Option<u16> = words.get(1).and_then(|p| p.parse().ok());
        let targets: Option<Vec<RawFd>> = words.iter().skip(2).map(|w| w.parse().ok()).collect();
        let (Some(port), Some(targets)) = (port, targets) else {
            close_all(&fds);
            reply(
                control,
                &format!(
                    "error expected `resume PORT FD...`, `take PORT FD...` or `spare PORT`, got {:?}",
                    command.trim()
                ),
            );
            continue;
        };
        let take = words[0] == "take";
        let spare = words[0] == "spare";
        if !(take || spare || words[0] == "resume") || fds.len() != 5 + targets.len() || (spare && !targets.is_empty())
        {
            close_all(&fds);
            reply(
                control,
                &format!(
                    "error `{}` with {} sockets needs {} descriptors, got {}",
                    words[0],
                    targets.len(),
                    5 + targets.len(),
                    fds.len()
                ),
            );
            continue;
        }
        // `take`: the holder itself becomes the copy (it answers first, as it
        // will not come back); `resume`: a fork of it does.
        let pid = if take {
            reply(control, &format!("took {holder}"));
            0
        } else {
            // SAFETY: single-threaded (this function's contract).
            unsafe { crate::shim_fork() }
        };
        if pid == 0 {
            // SAFETY: restoring the disposition saved by
            // `reap_children_automatically`, a valid sigaction.
            unsafe { libc::sigaction(libc::SIGCHLD, &old_chld, std::ptr::null_mut()) };
            close_all(&[control]);
            let sockets: Vec<(RawFd, RawFd)> = targets.iter().copied().zip(fds[5..].iter().copied()).collect();
            // A holder that takes over has no parent of sts's to die with.
            let dies = if take { crate::Parent::None } else { crate::Parent::DieWith };
            let child = crate::Child {
                parent: holder,
                stdout: fds[0],
                stderr: fds[1],
                report: fds[2],
                clock: Some(fds[3]),
                control: Some(fds[4]),
                // 0: every listener moves (a REST API's too).
                only_port: (port != 0).then_some(port),
                // A holder was single-threaded and listening: nothing to await.
                await_port: None,
            };
            if spare {
                // SAFETY: a copy just forked by this single-threaded holder.
                unsafe { crate::become_spare(child) };
            } else {
                // SAFETY: a freshly forked copy, or the single-threaded holder
                // itself (this function's contract), resumed on the sockets sts sent.
                unsafe { crate::become_child(child, &sockets, dies) };
            }
            return;
        }
        reply(control, &crate::parent_after_fork(pid, &fds, if spare { "spare" } else { "resumed" }));
    }
}

/// Puts fresh socket `fresh` in place of descriptor `target`, keeping the
/// descriptor's flags (non-blocking, close-on-exec) as the controller set them.
///
/// # Safety
///
/// `target` must be a connection of this process's to replace (a copy being
/// resumed), and `fresh` a socket sts sent for it.
pub unsafe fn replace_socket(target: RawFd, fresh: RawFd, report: &mut dyn Write) {
    // SAFETY: descriptor calls on `target` (ours to replace: this function's
    // contract) and `fresh` (ours), with pointers to our own values.
    unsafe {
        let flags = libc::fcntl(target, libc::F_GETFL);
        let fd_flags = libc::fcntl(target, libc::F_GETFD);
        if libc::dup2(fresh, target) < 0 {
            let _ = writeln!(report, "error socket {target}: {}", std::io::Error::last_os_error());
        } else {
            if flags >= 0 {
                libc::fcntl(target, libc::F_SETFL, flags);
            }
            if fd_flags >= 0 {
                libc::fcntl(target, libc::F_SETFD, fd_flags);
            }
            // Latency matters more than batching between sts and a controller.
            let one: c_int = 1;
            libc::setsockopt(
                target,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const c_int).cast(),
                std::mem::size_of::<c_int>() as libc::socklen_t,
            );
        }
        real!("close", unsafe extern "C" fn(c_int) -> c_int)(fresh);
    }
}
