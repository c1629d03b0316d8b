//! `libsts_shim.so`: loaded into a controller with `LD_PRELOAD`, it turns the
//! controller into a *zygote* that sts can fork into fresh copies (pristine
//! snapshots, `docs/snapshots.md`), and runs it on sts's virtual time (module `vtime`).
//!
//! # When it acts
//!
//! Only when `STS_SHIM_SOCKET` names a Unix socket sts listens on; otherwise
//! every hook just calls through. The controller starts as usual; once it has
//! a listening socket (`listen`) and then blocks waiting for events
//! (`epoll_wait`, `epoll_pwait`, `poll`, `ppoll`, `select`), it is ready and
//! quiescent: no switch has connected, no byte is in flight. There, inside
//! the wait, the shim becomes the zygote:
//!
//! - a threaded process parks whole, once it listens on the port sts awaits
//!   (`STS_SHIM_AWAIT`) and all its other threads sleep: each is parked in a
//!   signal handler where it sleeps, and each copy brings it back (`park`);
//!   one that cannot get there is refused (`refuse WHY`), and the process
//!   carries on unsnapshotted;
//! - otherwise it says `ready PID build=B threads=N parker=TID` and serves
//!   commands: `fork [PORT]` (with three or four descriptors passed along:
//!   the child's stdout, stderr, a report pipe, and optionally the run's
//!   clock page) or end of stream (the zygote exits).
//!
//! # The child
//!
//! A forked child must not share what later children will use, so before it
//! returns into the controller's wait it
//! - leaves the zygote's process group and dies with the zygote (PDEATHSIG);
//! - takes the stdout and stderr it was given;
//! - replaces the TCP listening socket on PORT (every TCP listening socket
//!   if no PORT was given) by a fresh one on the same address and a new free
//!   port, so children run side by side, and reports `port OLD NEW` on the
//!   report pipe, then `ok`. Other listeners (a REST API, say) stay shared
//!   and keep their ports;
//! - rebuilds every epoll instance from the interest lists the shim tracked
//!   (`epoll_ctl`), since an epoll instance is shared across fork;
//! - maps the clock page, if one came with `fork`: from then on it runs on
//!   that run's virtual time.
//!
//! The zygote never returns from its wait: it is parked for good.
//!
//! # Safety
//!
//! Every exported function (`listen`, `epoll_wait`, `clock_gettime` ...)
//! replaces the libc function of the same name and has exactly its
//! contract: the controller calls it as it would call libc, and the shim
//! passes the caller's pointers on unchanged (or reads them only where libc
//! would). Inside, every `unsafe` block says why it is sound; unsafe
//! operations in `unsafe fn`s need blocks of their own
//! (`unsafe_op_in_unsafe_fn`), so none hides in a function body.

// The exported hooks' contract is libc's, stated once above.
#![allow(clippy::missing_safety_doc)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void, CStr};
use std::io::Write;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::Mutex;

/// Listening sockets and epoll interest lists, as the controller made them.
struct Tracked {
    listening: Vec<RawFd>,
    epolls: BTreeMap<RawFd, BTreeMap<RawFd, libc::epoll_event>>,
}

static TRACKED: Mutex<Tracked> = Mutex::new(Tracked { listening: Vec::new(), epolls: BTreeMap::new() });

/// Where the process is: no socket to talk to (inert), armed (waiting for
/// a listening socket and a wait), or done (a child, refused, or failed).
const UNKNOWN: u8 = 0;
const INERT: u8 = 1;
const ARMED: u8 = 2;
const DONE: u8 = 3;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The next definition of `name` after this library (libc's); aborts the
/// process if there is none (without it nothing can work).
fn next(name: &CStr) -> *mut c_void {
    // SAFETY: `name` is a valid C string; RTLD_NEXT is a valid handle.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        let msg = b"sts-shim: a libc function is missing\n";
        // SAFETY: writing a valid buffer to stderr, then ending the process.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    f
}

/// The cached address of libc's `name` (NUL-terminated), looked up on first
/// use.
fn resolve(cache: &AtomicPtr<c_void>, name: &'static str) -> *mut c_void {
    let mut p = cache.load(Ordering::Relaxed);
    if p.is_null() {
        let Ok(name) = CStr::from_bytes_with_nul(name.as_bytes()) else { return next(c"(a bad name)") };
        p = next(name);
        cache.store(p, Ordering::Relaxed);
    }
    p
}

/// libc's definition of `$name`, as a function pointer of type `$ty` (the C
/// signature of `$name`). Looked up once, then cached.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static PTR: std::sync::atomic::AtomicPtr<std::ffi::c_void> =
            std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
        let p = $crate::resolve(&PTR, concat!($name, "\0"));
        // (Used inside unsafe blocks too, where this block is redundant.)
        #[allow(unused_unsafe)]
        // SAFETY: `p` is libc's non-null definition of `$name` (`next` aborts
        // otherwise), and every use names `$name`'s C signature as `$ty`.
        let f = unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p) };
        f
    }};
}

mod checkpoint;
mod deferred;
#[cfg(target_arch = "x86_64")]
mod park;
mod threads;
mod vtime;

/// Runs at load: attaches the clock page named by `STS_CLOCK`, if any, and
/// makes every child the process forks leave its parent's clock slot.
#[used]
#[link_section = ".init_array"]
static AT_LOAD: unsafe extern "C" fn() = {
    unsafe extern "C" fn at_load() {
        vtime::attach_from_env();
        // SAFETY: registering a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(vtime::slot_for_child)) };
    }
    at_load
};

fn tracked() -> std::sync::MutexGuard<'static, Tracked> {
    // A poisoned lock only means a panic elsewhere; the data is still usable.
    TRACKED.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    // SAFETY: libc's listen, with the caller's arguments.
    let r = unsafe { real!("listen", unsafe extern "C" fn(c_int, c_int) -> c_int)(fd, backlog) };
    if r == 0 {
        let mut t = tracked();
        if !t.listening.contains(&fd) {
            t.listening.push(fd);
        }
        drop(t);
        deferred::listening(fd);
        if awaited_port().is_none_or(|port| socket_port(fd, false) == Some(port)) {
            AWAITED_LISTENING.store(true, Ordering::Release);
        }
    }
    r
}

/// The OpenFlow port sts waits on (`STS_SHIM_AWAIT`): a threaded controller
/// is parked only once it listens there.
fn awaited_port() -> Option<u16> {
    static PORT: std::sync::OnceLock<Option<u16>> = std::sync::OnceLock::new();
    *PORT.get_or_init(|| std::env::var("STS_SHIM_AWAIT").ok().and_then(|p| p.parse().ok()))
}

/// Set once the process listens on the awaited port (any port, if sts named none).
static AWAITED_LISTENING: AtomicBool = AtomicBool::new(false);

#[no_mangle]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    // SAFETY: libc's epoll_create, with the caller's argument.
    let fd = unsafe { real!("epoll_create", unsafe extern "C" fn(c_int) -> c_int)(size) };
    if fd >= 0 {
        tracked().epolls.insert(fd, BTreeMap::new());
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: libc's epoll_create1, with the caller's argument.
    let fd = unsafe { real!("epoll_create1", unsafe extern "C" fn(c_int) -> c_int)(flags) };
    if fd >= 0 {
        tracked().epolls.insert(fd, BTreeMap::new());
    }
    fd
}

#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
    type EpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    // SAFETY: libc's epoll_ctl, with the caller's arguments.
    let r = unsafe { real!("epoll_ctl", EpollCtl)(epfd, op, fd, event) };
    if r == 0 {
        let mut t = tracked();
        let list = t.epolls.entry(epfd).or_default();
        match op {
            libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD if !event.is_null() => {
                // SAFETY: epoll_ctl just read this non-null event successfully.
                list.insert(fd, unsafe { *event });
            }
            libc::EPOLL_CTL_DEL => {
                list.remove(&fd);
            }
            _ => {}
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fd >= 0 && STATE.load(Ordering::Relaxed) != INERT {
        let mut t = tracked();
        t.listening.retain(|&l| l != fd);
        if t.epolls.remove(&fd).is_some() {
            checkpoint::forget_epoll(fd);
        }
        // Closing a descriptor drops its registrations (when it was the last
        // reference, as it is for the controller's own sockets).
        t.epolls.values_mut().for_each(|l| {
            l.remove(&fd);
        });
    }
    // SAFETY: libc's close, with the caller's argument.
    unsafe { real!("close", unsafe extern "C" fn(c_int) -> c_int)(fd) }
}

#[no_mangle]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    at_wait();
    let real = real!("epoll_wait", unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int);
    // SAFETY: libc's epoll_wait with the caller's buffer and size; only the
    // timeout is ours. What it returns is initialised, as the strip needs; a
    // wait ended by a command alone looks like a chunk that timed out, after
    // which the command is served (`vtime::wait`). The control socket is
    // registered at every chunk: a resumed copy gets a new one mid-wait.
    vtime::wait(vtime::from_ms(timeout), |chunk| unsafe {
        checkpoint::watch_from(epfd);
        checkpoint::strip_control_event(events, real(epfd, events, max, vtime::to_ms(chunk)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut libc::epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    at_wait();
    let real = real!(
        "epoll_pwait",
        unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int, *const libc::sigset_t) -> c_int
    );
    // SAFETY: libc's epoll_pwait with the caller's buffer, size and mask;
    // only the timeout is ours. As in `epoll_wait`.
    vtime::wait(vtime::from_ms(timeout), |chunk| unsafe {
        checkpoint::watch_from(epfd);
        checkpoint::strip_control_event(events, real(epfd, events, max, vtime::to_ms(chunk), mask))
    })
}

#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    at_wait();
    let real = real!("poll", unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, c_int) -> c_int);
    // SAFETY: libc's poll with the caller's array and length, or a copy of
    // it with the control socket added; only the timeout is ours.
    vtime::wait(vtime::from_ms(timeout), |chunk| unsafe {
        checkpoint::with_control_pollfd(fds, n, |fds, n| real(fds, n, vtime::to_ms(chunk)))
    })
}

#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut libc::pollfd,
    n: libc::nfds_t,
    timeout: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    at_wait();
    let real = real!(
        "ppoll",
        unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int
    );
    // SAFETY: a non-null timeout points to a timespec (ppoll's contract).
    let want = unsafe { vtime::from_timespec(timeout) };
    // SAFETY: libc's ppoll with the caller's array, length and mask, and a
    // timeout of ours that lives through the call.
    vtime::wait(want, |chunk| unsafe {
        checkpoint::with_control_pollfd(fds, n, |fds, n| match chunk {
            Some(ns) => real(fds, n, &vtime::timespec_of(ns), mask),
            None => real(fds, n, std::ptr::null(), mask),
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    at_wait();
    let real = real!(
        "select",
        unsafe extern "C" fn(
            c_int,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::fd_set,
            *mut libc::timeval,
        ) -> c_int
    );
    // A select that times out clears its sets: each chunk starts from the originals.
    // SAFETY: non-null set pointers point to fd_sets (select's contract).
    let saved = [r, w, e].map(|set| (!set.is_null()).then(|| unsafe { *set }));
    // SAFETY: a non-null timeout points to a timeval (select's contract).
    let want = unsafe { vtime::from_timeval(timeout) };
    let result = vtime::wait(want, |chunk| {
        for (set, copy) in [r, w, e].into_iter().zip(saved) {
            if let Some(copy) = copy {
                // SAFETY: `set` is one of the caller's non-null fd_sets.
                unsafe { *set = copy };
            }
        }
        let mut tv = chunk.map(|ns| libc::timeval {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_usec: (ns % 1_000_000_000 / 1000) as libc::suseconds_t,
        });
        // SAFETY: libc's select with the caller's sets and a timeout of ours.
        unsafe { real(n, r, w, e, tv.as_mut().map_or(std::ptr::null_mut(), |t| t as *mut libc::timeval)) }
    });
    if result == 0 && !timeout.is_null() {
        // SAFETY: the caller's non-null timeval; select zeroes it on timeout.
        unsafe { *timeout = libc::timeval { tv_sec: 0, tv_usec: 0 } };
    }
    result
}

/// Set while the shim itself forks (a zygote's copy, a checkpoint's holder,
/// a resumed copy): those children attach a clock slot themselves, or none.
static SHIM_FORK: AtomicBool = AtomicBool::new(false);

/// `fork` for the shim's own children (see [`SHIM_FORK`]).
///
/// # Safety
///
/// As `fork`: the process must have a single thread running (others may be
/// parked, `park`).
unsafe fn shim_fork() -> libc::pid_t {
    SHIM_FORK.store(true, Ordering::Release);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every other thread is parked (this function's contract).
    let pid = if park::parked() > 0 { unsafe { park::fork_whole() } } else { unsafe { libc::fork() } };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: single-threaded, this function's contract.
    let pid = unsafe { libc::fork() };
    SHIM_FORK.store(false, Ordering::Release);
    pid
}

/// True in a child the shim itself forked, until it clears the flag.
fn forked_by_shim() -> bool {
    SHIM_FORK.load(Ordering::Acquire)
}

/// Whether the shim should act: resolves `UNKNOWN` from the environment.
fn state() -> u8 {
    match STATE.load(Ordering::Relaxed) {
        UNKNOWN => {
            let s = if std::env::var_os("STS_SHIM_SOCKET").is_some() { ARMED } else { INERT };
            STATE.store(s, Ordering::Relaxed);
            s
        }
        s => s,
    }
}

/// Called before the process starts a thread. A process that is still
/// armed has never waited after a listen: it is starting up, and this is
/// the last moment it has one thread, so it becomes the zygote here (most of
/// a Python controller's start, its imports and config parsing, is behind
/// it). Each copy returns and starts its threads, and binds its listeners,
/// itself (see `deferred`).
fn before_first_thread() {
    // On x86-64 a threaded process is parked whole, later (`at_thread_wait`).
    if cfg!(target_arch = "x86_64") || state() != ARMED {
        return;
    }
    park(0);
}

/// Called on every wait: becomes the zygote at the first one after a listen.
fn at_wait() {
    if state() != ARMED {
        return;
    }
    if vtime::threads_started() {
        at_thread_wait();
        return;
    }
    if tracked().listening.is_empty() {
        return;
    }
    park(0);
}

/// Called on every wait of a threaded process: once it listens on the
/// awaited port and every other thread sleeps, it parks them all (`park`)
/// and becomes the zygote. A process that cannot get there (a thread never
/// sleeps, a parked thread declines) is refused after a few tries or
/// seconds, and runs on unsnapshotted.
#[cfg(target_arch = "x86_64")]
fn at_thread_wait() {
    /// One thread tries at a time (the others wait or are parked).
    static TRYING: AtomicBool = AtomicBool::new(false);
    static FAILURES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    static SINCE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if state() != ARMED || !vtime::threads_started() || !AWAITED_LISTENING.load(Ordering::Acquire) {
        return;
    }
    if TRYING.swap(true, Ordering::AcqRel) {
        return;
    }
    let now_ms = || threads::real_now(libc::CLOCK_MONOTONIC) / 1_000_000;
    let since = match SINCE_MS.load(Ordering::Acquire) {
        0 => {
            let t = now_ms().max(1);
            SINCE_MS.store(t, Ordering::Release);
            t
        }
        t => t,
    };
    match park::park_others() {
        Ok(n) => park(n),
        Err(park::NotParked::NotYet) if now_ms().saturating_sub(since) < 5_000 => {}
        Err(park::NotParked::NotYet) => refuse("its threads never all slept once it listened (5 s)"),
        Err(park::NotParked::Failed(why)) => {
            if FAILURES.fetch_add(1, Ordering::AcqRel) + 1 >= 5 {
                refuse(&format!("its threads could not be parked: {why}"));
            }
        }
    }
    TRYING.store(false, Ordering::Release);
}

#[cfg(not(target_arch = "x86_64"))]
fn at_thread_wait() {}

/// Says the process cannot be parked, and why; it runs on unsnapshotted.
#[cfg(target_arch = "x86_64")]
fn refuse(why: &str) {
    if let Some(mut control) = connect_to_sts() {
        let _ = writeln!(control, "refuse {why}");
    }
}

/// Done acting as the shim of a zygote-to-be: connects to the socket sts
/// named in `STS_SHIM_SOCKET`, if any, and takes the variable out of the
/// environment (it must not leak into processes the controller starts).
fn connect_to_sts() -> Option<UnixStream> {
    STATE.store(DONE, Ordering::Relaxed);
    let path = std::env::var_os("STS_SHIM_SOCKET")?;
    std::env::remove_var("STS_SHIM_SOCKET");
    UnixStream::connect(&path).ok()
}

/// Becomes the zygote (returns only in a copy), or says why it cannot.
/// `parked` other threads are parked in their signal handlers (`park`).
fn park(parked: usize) {
    let Some(mut control) = connect_to_sts() else { return };
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    if threads != 1 + parked {
        let _ = writeln!(control, "refuse threads={threads}");
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // The threads and which one parked them: for logs and tests.
    let (build, parker) = (sts_clockpage::SHIM_BUILD, vtime::gettid());
    if writeln!(control, "ready {pid} build={build} threads={threads} parker={parker}").is_err() {
        return;
    }
    // SAFETY: every thread but this one is parked for good in its signal
    // handler, asleep: the process runs one thread, as `zygote` needs.
    unsafe { zygote(control) };
}

/// Serves `fork` commands until sts closes the control socket, then exits.
/// Returns only in a child.
///
/// # Safety
///
/// The process must have a single thread: each `fork` copies only the
/// calling one.
unsafe fn zygote(mut control: UnixStream) {
    // SAFETY: getpid has no preconditions.
    let zygote_pid = unsafe { libc::getpid() };
    let old_chld = reap_children_automatically();
    // SAFETY: single-threaded (this function's contract).
    let Forked::Zygote(mut spare) = (unsafe { Spare::fork(zygote_pid, &old_chld) }) else {
        // The spare, started: into the controller's wait, without the
        // zygote's control socket (only the zygote talks on it).
        drop(control);
        return;
    };
    loop {
        let Received::Command(command, fds) = receive(control.as_raw_fd(), 0) else {
            // SAFETY: sts let go of the zygote: it ends, with nothing to flush.
            unsafe { libc::_exit(0) }
        };
        let Some(child) = parse_fork(zygote_pid, &command, &fds) else {
            close_ours(&fds);
            let _ = writeln!(
                control,
                "error expected `fork PORT [clock] [control]` with 3 descriptors and one per option, got {:?} with {}",
                command.trim(),
                fds.len()
            );
            continue;
        };
        // The copy forked ahead of time takes the command if it can: the
        // fork is then off the path of whoever asked.
        if let Some(pid) = spare.take().and_then(|s| s.start(&command, &fds)) {
            close_ours(&fds);
            if writeln!(control, "forked {pid}").is_err() {
                // SAFETY: sts is gone: the zygote ends, with nothing to flush.
                unsafe { libc::_exit(0) };
            }
            // SAFETY: single-threaded (this function's contract).
            match unsafe { Spare::fork(zygote_pid, &old_chld) } {
                Forked::Zygote(next) => spare = next,
                Forked::Spare => {
                    drop(control); // as above
                    return;
                }
            }
            continue;
        }
        // SAFETY: single-threaded (this function's contract), so the child is
        // a whole copy of the process.
        let pid = unsafe { shim_fork() };
        if pid == 0 {
            // SAFETY: restoring the disposition saved by
            // `reap_children_automatically`, a valid sigaction.
            unsafe { libc::sigaction(libc::SIGCHLD, &old_chld, std::ptr::null_mut()) };
            // The child must not hold the zygote's control socket: only the
            // zygote talks on it.
            drop(control);
            // SAFETY: a freshly forked copy, as `become_child` needs.
            unsafe { become_child(child, &[], Parent::DieWith) };
            return;
        }
        let reply = parent_after_fork(pid, &fds, "forked");
        if writeln!(control, "{reply}").is_err() {
            // SAFETY: sts is gone: the zygote ends, with nothing to flush.
            unsafe { libc::_exit(0) };
        }
    }
}

/// Who returns from [`Spare::fork`].
enum Forked {
    /// The zygote, with its new spare (none if the fork failed).
    Zygote(Option<Spare>),
    /// The spare, started by a `fork` command: a copy now.
    Spare,
}

/// A copy a zygote forked ahead of time, parked until the next `fork`
/// command, which the zygote passes on to it: the copy then becomes a child
/// as a copy forked on the spot would (the zygote never changes, so the two
/// are the same), and the fork's cost (a millisecond or more for a Python
/// controller) is paid while nobody waits.
struct Spare {
    pid: libc::pid_t,
    /// The zygote's end of the socket the spare waits on.
    socket: UnixStream,
}

impl Spare {
    /// Forks a spare of the zygote `zygote` (`old_chld` is the SIGCHLD
    /// disposition children restore). No spare if it cannot (the zygote then
    /// forks on demand). Returns in the spare too, once a command started it.
    ///
    /// # Safety
    ///
    /// The process must have a single thread (it forks).
    unsafe fn fork(zygote: libc::pid_t, old_chld: &libc::sigaction) -> Forked {
        let Ok((ours, theirs)) = UnixStream::pair() else { return Forked::Zygote(None) };
        // SAFETY: single-threaded (this function's contract).
        let pid = unsafe { shim_fork() };
        if pid < 0 {
            return Forked::Zygote(None);
        }
        if pid > 0 {
            // SAFETY: setpgid on our own child has no memory effects.
            unsafe { libc::setpgid(pid, pid) };
            return Forked::Zygote(Some(Spare { pid, socket: ours }));
        }
        // The spare, which must die with the zygote even while it is parked.
        drop(ours);
        // SAFETY: process-level calls with plain arguments; restoring the
        // disposition saved by `reap_children_automatically`.
        unsafe {
            libc::sigaction(libc::SIGCHLD, old_chld, std::ptr::null_mut());
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != zygote {
                libc::_exit(1); // the zygote died before PDEATHSIG was set
            }
        }
        let Received::Command(command, fds) = receive(theirs.as_raw_fd(), 0) else {
            // SAFETY: the zygote let go of its spare (it ends, or is gone).
            unsafe { libc::_exit(0) }
        };
        drop(theirs);
        let Some(child) = parse_fork(zygote, &command, &fds) else {
            // SAFETY: the zygote checked the command before passing it on.
            unsafe { libc::_exit(1) }
        };
        // SAFETY: a copy of the zygote, as freshly forked as one forked now.
        unsafe { become_child(child, &[], Parent::DieWith) };
        Forked::Spare
    }

    /// Passes a `fork` command and its descriptors on; the spare's pid if it
    /// took them (`None` if it is gone: the zygote forks on demand).
    fn start(self, command: &str, fds: &[RawFd]) -> Option<libc::pid_t> {
        let mut cmsg = [0u8; 512];
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        if space > cmsg.len() {
            return None;
        }
        let mut iov = libc::iovec { iov_base: command.as_ptr() as *mut c_void, iov_len: command.len() };
        // SAFETY: msghdr is a plain C struct, valid all zero.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: the CMSG macros fill our own buffer, sized by CMSG_SPACE
        // for `fds` above; sendmsg reads our live buffers with their true
        // lengths (the command is only read).
        let sent = unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c) as *mut RawFd, fds.len());
            libc::sendmsg(self.socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
        };
        (sent == command.len() as isize).then_some(self.pid)
    }
}

/// Closes descriptors that came with a command (they are ours alone).
/// The forking side of a copy made for sts (a zygote's copy, a checkpoint's
/// resumed copy): the copy gets a process group of its own, the descriptors
/// sent for it are closed here, and the line to answer sts is returned
/// (`DONE PID`, or the fork's error).
fn parent_after_fork(pid: libc::pid_t, fds: &[RawFd], done: &str) -> String {
    // Before anything else can overwrite errno.
    let failed = (pid < 0).then(std::io::Error::last_os_error);
    if pid > 0 {
        // The child leaves the group itself too; setting it here as well
        // leaves no window in which killing the group takes it.
        // SAFETY: setpgid on our own child has no memory effects.
        unsafe { libc::setpgid(pid, pid) };
    }
    close_ours(fds);
    match failed {
        Some(e) => format!("error fork: {e}"),
        None => format!("{done} {pid}"),
    }
}

fn close_ours(fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: received with SCM_RIGHTS, so owned by nobody else here;
        // closing through libc keeps the shim's own tracking out of it.
        unsafe { real!("close", unsafe extern "C" fn(c_int) -> c_int)(fd) };
    }
}

/// Lets the kernel reap this process's children (a zygote's copies, a
/// holder's resumed copies: sts watches them by pid). Returns the old
/// SIGCHLD disposition, for the children to put back.
fn reap_children_automatically() -> libc::sigaction {
    // SAFETY: sigaction is a plain C struct, valid all zero.
    let (mut old, mut ignore): (libc::sigaction, libc::sigaction) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    ignore.sa_sigaction = libc::SIG_IGN;
    // SAFETY: both pointers are to live sigactions of ours.
    unsafe { libc::sigaction(libc::SIGCHLD, &ignore, &mut old) };
    old
}

/// Reads `fork [PORT] [clock] [control] [await=PORT]` and its descriptors:
/// stdout, stderr, a report pipe, then one per option named (`await` takes
/// none: the port whose listener ends the report, see `deferred`). Four
/// descriptors and no option named mean a clock page (the older form).
fn parse_fork(parent: libc::pid_t, command: &str, fds: &[RawFd]) -> Option<Child> {
    let mut words: Vec<&str> = command.split_whitespace().collect();
    if words.first() != Some(&"fork") || fds.len() < 3 {
        return None;
    }
    let mut await_port = None;
    if let Some(i) = words.iter().position(|w| w.starts_with("await=")) {
        await_port = Some(words[i]["await=".len()..].parse::<u16>().ok()?);
        words.remove(i);
    }
    let only_port: Option<u16> = words.get(1).and_then(|p| p.parse().ok());
    let mut options: Vec<&str> = words.iter().skip(1 + usize::from(only_port.is_some())).copied().collect();
    if options.is_empty() && fds.len() == 4 {
        options.push("clock");
    }
    if fds.len() != 3 + options.len() {
        return None;
    }
    let mut child = Child {
        parent,
        stdout: fds[0],
        stderr: fds[1],
        report: fds[2],
        clock: None,
        control: None,
        only_port,
        await_port,
    };
    for (name, &fd) in options.iter().zip(&fds[3..]) {
        match *name {
            "clock" => child.clock = Some(fd),
            "control" => child.control = Some(fd),
            _ => return None,
        }
    }
    Some(child)
}

/// What one read of a control socket gave.
enum Received {
    /// A command line and the descriptors that came with it.
    Command(String, Vec<RawFd>),
    /// Nothing yet (only with `MSG_DONTWAIT`).
    Nothing,
    /// The other end closed, or the socket failed.
    Closed,
}

/// Reads one command line and the descriptors that came with it.
fn receive(fd: RawFd, flags: c_int) -> Received {
    let mut buf = [0u8; 1024];
    let mut cmsg = [0u8; 512];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: msghdr is a plain C struct, valid all zero.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = cmsg.len() as _;
    type RecvMsg = unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> isize;
    // libc's own: the shim's reads are not the controller's waits.
    // SAFETY: `msg` describes our own live buffers, with their true lengths.
    let n = unsafe { real!("recvmsg", RecvMsg)(fd, &mut msg, libc::MSG_CMSG_CLOEXEC | flags) };
    if n < 0 {
        let e = std::io::Error::last_os_error().raw_os_error();
        if e == Some(libc::EAGAIN) || e == Some(libc::EINTR) {
            return Received::Nothing;
        }
        return Received::Closed;
    }
    if n == 0 {
        return Received::Closed;
    }
    let mut fds = Vec::new();
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within
    // the length it set; each header they return is inside it, and an
    // SCM_RIGHTS payload holds `count` descriptors (possibly unaligned).
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c) as *const RawFd;
                let count = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<RawFd>();
                fds.extend((0..count).map(|i| std::ptr::read_unaligned(data.add(i))));
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Received::Command(String::from_utf8_lossy(&buf[..n as usize]).into_owned(), fds)
}

/// What a new copy is given: its parent (a zygote or a checkpoint holder),
/// its output, its report pipe, and optionally a clock page, a control socket
/// and the one listening port to replace.
struct Child {
    parent: libc::pid_t,
    stdout: RawFd,
    stderr: RawFd,
    report: RawFd,
    clock: Option<RawFd>,
    control: Option<RawFd>,
    only_port: Option<u16>,
    /// The controller's OpenFlow port: if no listener on it was replaced,
    /// the copy has yet to bind it (it was parked before it listened there),
    /// and the report ends only once it listens (see `deferred`).
    await_port: Option<u16>,
}

/// Whether a new copy dies with the process that made it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parent {
    /// A forked copy: it dies with its zygote or holder (PDEATHSIG).
    DieWith,
    /// A holder that took over: its parent is the copy sts is killing; it
    /// ends when sts lets go of its control socket instead.
    None,
}

/// Makes a new copy independent of its parent and its siblings; with
/// `sockets` (target, fresh), puts each fresh socket in place of its target
/// descriptor (a copy resumed from a checkpoint).
///
/// # Safety
///
/// Only in a freshly forked copy, or a holder taking over: it takes over
/// standard output, and replaces listeners, epoll instances and (with
/// `sockets`) connections under the controller's descriptor numbers.
unsafe fn become_child(child: Child, sockets: &[(RawFd, RawFd)], parent: Parent) {
    // SAFETY: a new copy (this function's contract).
    let mut report = unsafe { leave_parent(&child, parent) };
    attach_clock(child.clock, &mut report);
    checkpoint::set_control(child.control.unwrap_or(-1));
    checkpoint::exit_when_released(parent == Parent::None);
    for &(target, fresh) in sockets {
        // SAFETY: a resumed copy (this function's contract) replacing a
        // connection sts listed, with the fresh socket it sent for it.
        unsafe { checkpoint::replace_socket(target, fresh, &mut report) };
    }
    // SAFETY: a new copy (this function's contract).
    let awaited_found = unsafe { replace_listeners(&child, &mut report) };
    // SAFETY: as above; after the listeners and connections were replaced.
    unsafe { rebuild_waits(&mut report) };
    match child.await_port {
        Some(port) if !awaited_found => deferred::start(report, port),
        _ => {
            let _ = writeln!(report, "ok");
        }
    }
}

/// A *spare* copy of a checkpoint holder (`spare PORT`): forked ahead of the
/// resume that will use it, so that the fork and the copy's first steps are
/// not on that resume's path. It does what a resumed copy does up to its
/// report (a process group of its own, its output, a fresh listener), then
/// waits on its control socket, outside the run's time (no clock slot yet),
/// for `go FD...` with one fresh socket per descriptor. Then it attaches the
/// clock, puts the sockets in place, rebuilds its epoll instances, answers
/// `went` (or `error ...`) on the control socket, and returns into the
/// controller's wait. sts letting go of the control socket ends it.
///
/// # Safety
///
/// Only in a copy just forked by a single-threaded checkpoint holder.
unsafe fn become_spare(child: Child) {
    // SAFETY: a new copy (this function's contract).
    let mut report = unsafe { leave_parent(&child, Parent::DieWith) };
    let control = child.control.unwrap_or(-1);
    checkpoint::set_control(control);
    checkpoint::exit_when_released(false);
    // SAFETY: a new copy (this function's contract).
    unsafe { replace_listeners(&child, &mut report) };
    let _ = writeln!(report, "ok");
    drop(report);
    let (targets, fds) = loop {
        match receive(control, 0) {
            Received::Command(command, fds) => {
                let targets: Option<Vec<RawFd>> = match command.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["go", rest @ ..] => rest.iter().map(|w| w.parse().ok()).collect(),
                    _ => None,
                };
                match targets {
                    Some(t) if t.len() == fds.len() => break (t, fds),
                    _ => {
                        close_ours(&fds);
                        checkpoint::reply(
                            control,
                            &format!("error expected `go FD...` with a socket each, got {:?}", command.trim()),
                        );
                    }
                }
            }
            Received::Nothing => {}
            // SAFETY: sts let go of the spare before using it: nothing to flush.
            Received::Closed => unsafe { libc::_exit(0) },
        }
    };
    let mut errors: Vec<u8> = Vec::new();
    attach_clock(child.clock, &mut errors);
    for (&target, &fresh) in targets.iter().zip(&fds) {
        // SAFETY: a spare copy (this function's contract) replacing a
        // connection sts listed, with the fresh socket it sent for it.
        unsafe { checkpoint::replace_socket(target, fresh, &mut errors) };
    }
    // SAFETY: as above; after the listeners and connections were replaced.
    unsafe { rebuild_waits(&mut errors) };
    let errors = String::from_utf8_lossy(&errors);
    match errors.lines().next() {
        Some(first) => checkpoint::reply(control, first),
        None => checkpoint::reply(control, "went"),
    }
}

/// A new copy's first steps: a process group of its own, dying with its
/// parent (unless `parent` says otherwise), its own standard output and
/// error. Returns its report pipe.
///
/// # Safety
///
/// Only in a freshly forked copy, or a holder taking over.
unsafe fn leave_parent(child: &Child, parent: Parent) -> std::fs::File {
    // SAFETY: process-level calls with plain arguments; the descriptors in
    // `child` came with the command and are this copy's to use and close.
    unsafe {
        libc::setpgid(0, 0);
        if parent == Parent::DieWith {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != child.parent {
                libc::_exit(1); // the parent died before PDEATHSIG was set
            }
        }
        libc::dup2(child.stdout, 1);
        libc::dup2(child.stderr, 2);
        libc::close(child.stdout);
        libc::close(child.stderr);
        // The report pipe came with the command: this File owns it.
        std::fs::File::from_raw_fd(child.report)
    }
}

/// Attaches the copy to the run's clock page, if it was given one.
fn attach_clock(clock: Option<RawFd>, report: &mut dyn Write) {
    if let Some(clock) = clock {
        if let Err(e) = vtime::attach_fd(clock) {
            let _ = writeln!(report, "error clock page: {e}");
        }
        close_ours(&[clock]);
    }
}

/// Replaces the copy's listeners by fresh ones on new ports (reported as
/// `port OLD NEW`). Returns whether the port `child` awaits was among them.
///
/// # Safety
///
/// Only in a new copy, on its own listeners.
unsafe fn replace_listeners(child: &Child, report: &mut dyn Write) -> bool {
    let listening = tracked().listening.clone();
    let mut awaited_found = child.await_port.is_none();
    for fd in listening {
        // SAFETY: a fresh copy (this function's contract) replacing its own
        // listener.
        match unsafe { fresh_listener(fd, child.only_port) } {
            Ok(Some((old, new))) => {
                awaited_found |= Some(old) == child.await_port;
                let _ = writeln!(report, "port {old} {new}");
            }
            Ok(None) => {}
            Err(e) => {
                let _ = writeln!(report, "error listening socket {fd}: {e}");
            }
        }
    }
    awaited_found
}

/// Gives the copy epoll instances of its own (a fork shares its parent's)
/// and brings back the threads parked with it.
///
/// # Safety
///
/// Only in a new copy, once its descriptors are all in place.
unsafe fn rebuild_waits(report: &mut dyn Write) {
    let epolls: Vec<(RawFd, Vec<(RawFd, libc::epoll_event)>)> =
        tracked().epolls.iter().map(|(&e, l)| (e, l.iter().map(|(&f, &ev)| (f, ev)).collect())).collect();
    for (epfd, list) in epolls {
        // SAFETY: a fresh copy (this function's contract) rebuilding its own
        // epoll instance.
        if let Err(e) = unsafe { rebuild_epoll(epfd, &list) } {
            let _ = writeln!(report, "error epoll {epfd}: {e}");
        }
    }
    #[cfg(target_arch = "x86_64")]
    if park::parked() > 0 {
        // After the listeners were replaced: the threads brought back wait
        // on the copy's own sockets.
        // SAFETY: a fresh copy (this function's contract), once.
        if let Err(e) = unsafe { park::bring_back() } {
            let _ = writeln!(report, "error {e}");
        }
    }
}

/// The port of an IPv4 or IPv6 socket address (`None` for other families).
fn port_of(addr: &libc::sockaddr_storage) -> Option<u16> {
    // SAFETY: sockaddr_storage is large and aligned enough for every
    // address type, and `ss_family` says which one it holds.
    unsafe {
        match addr.ss_family as c_int {
            libc::AF_INET => Some(u16::from_be((*(addr as *const _ as *const libc::sockaddr_in)).sin_port)),
            libc::AF_INET6 => Some(u16::from_be((*(addr as *const _ as *const libc::sockaddr_in6)).sin6_port)),
            _ => None,
        }
    }
}

/// The local (or, with `peer`, the remote) address of socket `fd`.
fn socket_addr(fd: RawFd, peer: bool) -> std::io::Result<(libc::sockaddr_storage, libc::socklen_t)> {
    // SAFETY: sockaddr_storage is a plain C struct, valid all zero.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let get = if peer { libc::getpeername } else { libc::getsockname };
    // SAFETY: `addr` and `len` are ours, `len` its true size.
    if unsafe { get(fd, (&mut addr as *mut libc::sockaddr_storage).cast(), &mut len) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((addr, len))
}

/// The local (or, with `peer`, the remote) port of a TCP socket over IP.
fn socket_port(fd: RawFd, peer: bool) -> Option<u16> {
    socket_addr(fd, peer).ok().and_then(|(addr, _)| port_of(&addr))
}

/// Replaces TCP listening socket `fd` by a fresh one on the same address and
/// a new port, keeping the descriptor number and its flags. Returns the old
/// and new ports (`None` for sockets that are not TCP over IP, or not on
/// `only_port` when given).
///
/// # Safety
///
/// `fd` must be this process's own listener to replace (a fresh copy's).
unsafe fn fresh_listener(fd: RawFd, only_port: Option<u16>) -> std::io::Result<Option<(u16, u16)>> {
    let last = std::io::Error::last_os_error;
    let (mut addr, len) = socket_addr(fd, false)?;
    let family = addr.ss_family as c_int;
    let Some(old_port) = port_of(&addr) else { return Ok(None) };
    if only_port.is_some_and(|p| p != old_port) {
        return Ok(None);
    }
    // SAFETY: `ss_family` says which address type `addr` holds, and
    // sockaddr_storage fits and aligns every one.
    unsafe {
        if family == libc::AF_INET {
            (*(&mut addr as *mut libc::sockaddr_storage as *mut libc::sockaddr_in)).sin_port = 0;
        } else {
            (*(&mut addr as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6)).sin6_port = 0;
        }
    }
    // SAFETY: socket calls on a socket of ours (`new`) with pointers to our
    // own values and their true sizes; `fd` is ours to replace (this
    // function's contract), and keeps its flags.
    unsafe {
        let new = libc::socket(family, libc::SOCK_STREAM, 0);
        if new < 0 {
            return Err(last());
        }
        let one: c_int = 1;
        libc::setsockopt(
            new,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const c_int).cast(),
            std::mem::size_of::<c_int>() as libc::socklen_t,
        );
        if libc::bind(new, (&addr as *const libc::sockaddr_storage).cast(), len) != 0 {
            let e = last();
            libc::close(new);
            return Err(e);
        }
        if real!("listen", unsafe extern "C" fn(c_int, c_int) -> c_int)(new, 128) != 0 {
            let e = last();
            libc::close(new);
            return Err(e);
        }
        let flags = libc::fcntl(fd, libc::F_GETFL);
        let fd_flags = libc::fcntl(fd, libc::F_GETFD);
        let bound = socket_addr(new, false);
        if libc::dup2(new, fd) < 0 {
            let e = last();
            libc::close(new);
            return Err(e);
        }
        real!("close", unsafe extern "C" fn(c_int) -> c_int)(new);
        libc::fcntl(fd, libc::F_SETFL, flags);
        libc::fcntl(fd, libc::F_SETFD, fd_flags);
        Ok(Some((old_port, bound.ok().and_then(|(b, _)| port_of(&b)).unwrap_or(0))))
    }
}

/// Gives descriptor `epfd` a new epoll instance with the same interest list.
///
/// # Safety
///
/// `epfd` must be this process's own epoll instance to replace (a fresh
/// copy's).
unsafe fn rebuild_epoll(epfd: RawFd, list: &[(RawFd, libc::epoll_event)]) -> std::io::Result<()> {
    type EpollCtl = unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    // SAFETY: epoll calls on an instance of ours (`fresh`) with events of
    // ours; `epfd` is ours to replace (this function's contract).
    unsafe {
        let fresh = real!("epoll_create1", unsafe extern "C" fn(c_int) -> c_int)(libc::EPOLL_CLOEXEC);
        if fresh < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for &(fd, mut ev) in list {
            // A descriptor closed since its registration simply fails here.
            real!("epoll_ctl", EpollCtl)(fresh, libc::EPOLL_CTL_ADD, fd, &mut ev);
        }
        let fd_flags = libc::fcntl(epfd, libc::F_GETFD);
        if libc::dup2(fresh, epfd) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        real!("close", unsafe extern "C" fn(c_int) -> c_int)(fresh);
        libc::fcntl(epfd, libc::F_SETFD, fd_flags);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_commands_name_their_descriptors_and_the_awaited_port() {
        let c = parse_fork(7, "fork clock control await=6653\n", &[10, 11, 12, 13, 14]).unwrap();
        assert_eq!((c.stdout, c.stderr, c.report, c.clock, c.control), (10, 11, 12, Some(13), Some(14)));
        assert_eq!((c.only_port, c.await_port), (None, Some(6653)));
        // The older forms still parse: a port to replace, four descriptors.
        let c = parse_fork(7, "fork 6633\n", &[10, 11, 12, 13]).unwrap();
        assert_eq!((c.only_port, c.clock, c.await_port), (Some(6633), Some(13), None));
        // `await` takes no descriptor; a bad port or a missing descriptor is refused.
        assert!(parse_fork(7, "fork await=6653\n", &[10, 11, 12]).is_some());
        assert!(parse_fork(7, "fork await=port\n", &[10, 11, 12]).is_none());
        assert!(parse_fork(7, "fork clock\n", &[10, 11, 12]).is_none());
        assert!(parse_fork(7, "spawn\n", &[10, 11, 12]).is_none());
    }
}
