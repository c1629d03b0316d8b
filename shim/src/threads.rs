//! Virtual time for threaded controllers (issue 37, `docs/virtual-time.md`).
//!
//! Every thread of a process on virtual time has a slot of its own in the
//! clock page: the main thread takes one when the shim loads, a thread the
//! controller creates gets one from its creator *before* it exists (so the
//! process never looks idle while a thread is being born), and gives it back
//! when it returns. A slot says `WAITING` only while its thread is inside a
//! wait the shim knows, with that wait's virtual deadline; sts lets time jump
//! only when every thread of the run waits and the kernel says none is
//! runnable (`clock.rs` in the engine).
//!
//! The waits a thread can block in, and how each is followed:
//!
//! - timed waits that time out on a clock (`sem_timedwait`, `sem_clockwait`,
//!   `pthread_cond_timedwait`, `pthread_cond_clockwait`,
//!   `pthread_mutex_timedlock`, `futex` through `syscall`, and the event
//!   waits and sleeps in `lib.rs` and `vtime.rs`) run on virtual time: the
//!   deadline is read on the virtual clock and published, and the real wait
//!   is cut into chunks so that the thread notices a jump within one;
//! - waits without a timeout (`sem_wait`, `pthread_cond_wait`,
//!   `pthread_mutex_lock` once `trylock` failed, `pthread_join`, `waitpid`,
//!   and blocking `read`, `recv`, `recvfrom`, `recvmsg`, `accept`, `accept4`)
//!   publish "no deadline": only an event (input from sts, another thread,
//!   a child) ends them;
//! - timers the shim cannot move (a socket timeout, a timerfd, a POSIX or
//!   interval timer) make the shim record a *refusal* in the page, and time
//!   stops jumping for the run, with the reason named.
//!
//! A wait the shim does not see at all (a raw `syscall` instruction, a static
//! binary) leaves its thread's slot `BUSY` while the kernel says it sleeps:
//! time then never jumps, and sts names the thread and its system call.

use std::ffi::{c_int, c_long, c_void};

use crate::vtime::{self, ns_of};

/// What a new thread needs to take its slot and run.
struct Start {
    start: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    slot: usize,
}

/// The new thread's first function: takes the slot its creator claimed,
/// runs the controller's function, gives the slot back.
///
/// `C-unwind`: a thread that ends with `pthread_exit` (or is cancelled)
/// unwinds through here; its slot is then freed by sts, which finds the
/// thread gone.
extern "C-unwind" fn trampoline(start: *mut c_void) -> *mut c_void {
    // SAFETY: `pthread_create` below passes a `Box<Start>` it leaked, and
    // only this thread takes it back.
    let Start { start, arg, slot } = *unsafe { Box::from_raw(start.cast::<Start>()) };
    let tid = vtime::gettid();
    let page = vtime::page();
    if let Some(page) = page {
        page.slot(slot).hand_to(tid);
        vtime::set_slot(slot);
    }
    let result = start(arg);
    if let Some(page) = page {
        vtime::set_slot(usize::MAX);
        page.slot(slot).release(tid);
    }
    result
}

type StartFn = extern "C" fn(*mut c_void) -> *mut c_void;
type Create = unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartFn, *mut c_void) -> c_int;

#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartFn,
    arg: *mut c_void,
) -> c_int {
    let real = real!("pthread_create", Create);
    crate::before_first_thread();
    if vtime::note_thread_started() {
        // No more checkpoint commands: a threaded process cannot be forked whole.
        crate::checkpoint::set_control(-1);
    }
    let Some(page) = vtime::page() else {
        // SAFETY: libc's pthread_create with the caller's arguments.
        return unsafe { real(thread, attr, start, arg) };
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let Some((slot, claimed)) = page.claim(pid, vtime::gettid(), vtime::thread_gone) else {
        // No slot: the thread's waits would be invisible, so time must stop.
        page.refuse(sts_clockpage::refusal::NO_SLOT, vtime::gettid());
        // SAFETY: libc's pthread_create with the caller's arguments.
        return unsafe { real(thread, attr, start, arg) };
    };
    let boxed = Box::into_raw(Box::new(Start { start, arg, slot }));
    // The trampoline is `C-unwind`; pthread_create takes a `C` function of
    // the same signature and ABI otherwise.
    // SAFETY: both are `fn(*mut c_void) -> *mut c_void` in the C calling
    // convention; they differ only in whether unwinding may cross them.
    let tramp: StartFn =
        unsafe { std::mem::transmute::<extern "C-unwind" fn(*mut c_void) -> *mut c_void, StartFn>(trampoline) };
    // SAFETY: libc's pthread_create with the caller's thread and attributes,
    // our trampoline and its leaked argument.
    let r = unsafe { real(thread, attr, tramp, boxed.cast()) };
    if r != 0 {
        // SAFETY: the thread was not created: the box is still ours.
        drop(unsafe { Box::from_raw(boxed) });
        claimed.release(vtime::gettid());
    }
    r
}

/// Runs `call` with this thread's slot saying "waiting, no deadline": a
/// blocking call only an event can end.
#[inline]
fn blocking<T>(call: impl FnOnce() -> T) -> T {
    crate::at_thread_wait();
    let Some(slot) = vtime::slot() else {
        let r = parked_blocking(call);
        // A thread parked in `call` and brought back in a copy (`park`) has
        // a slot now, which says it waits: it does not any more.
        if let Some(slot) = vtime::slot() {
            slot.woke();
        }
        return r;
    };
    vtime::enter_wait(&slot, sts_clockpage::NO_DEADLINE);
    let r = call();
    slot.woke();
    r
}

/// `call`, marked for the parking of threads (`park`): a copy of a thread
/// parked inside it starts as waiting without deadline.
#[cfg(target_arch = "x86_64")]
fn parked_blocking<T>(call: impl FnOnce() -> T) -> T {
    crate::park::marked_blocking(call)
}

#[cfg(not(target_arch = "x86_64"))]
fn parked_blocking<T>(call: impl FnOnce() -> T) -> T {
    call()
}

fn errno() -> c_int {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() = e };
}

/// Real nanoseconds on `clock` now (unshifted).
pub(crate) fn real_now(clock: libc::clockid_t) -> u64 {
    type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: libc's clock_gettime writing into our own timespec.
    unsafe { real!("clock_gettime", ClockGettime)(clock, &mut ts) };
    ns_of(&ts)
}

/// The virtual time left until `abstime` on `clock` (the caller computed
/// `abstime` from the shifted clock it reads).
///
/// # Safety
///
/// `abstime` points to a timespec.
unsafe fn left_until_abs(clock: libc::clockid_t, abstime: *const libc::timespec) -> u64 {
    // SAFETY: this function's contract.
    vtime::left_until(clock, ns_of(unsafe { &*abstime }))
}

/// Runs a wait that times out at a real absolute time on `clock` on virtual
/// time instead: `real_wait(abs)` waits until real `abs` and returns
/// `Ok(r)` when something other than its timeout ended it, `Err(())` when it
/// timed out. Returns `Some(r)`, or `None` once the virtual deadline passed.
fn timed_abs<T>(
    clock: libc::clockid_t,
    left_ns: u64,
    mut real_wait: impl FnMut(&libc::timespec) -> Result<T, ()>,
) -> Option<T> {
    let mut result = None;
    vtime::wait(Some(left_ns), |chunk| {
        let abs = vtime::timespec_of(real_now(clock).saturating_add(chunk.unwrap_or(0)));
        match real_wait(&abs) {
            Ok(r) => {
                result = Some(r);
                1
            }
            Err(()) => 0,
        }
    });
    result
}

/// True when this thread waits on virtual time (a timed wait needs work).
fn on_virtual_time() -> bool {
    vtime::slot().is_some()
}

#[no_mangle]
pub unsafe extern "C" fn sem_wait(sem: *mut libc::sem_t) -> c_int {
    let real = real!("sem_wait", unsafe extern "C" fn(*mut libc::sem_t) -> c_int);
    // SAFETY: libc's sem_wait with the caller's semaphore.
    blocking(|| unsafe { real(sem) })
}

/// A semaphore wait until `abstime` on `clock`, on virtual time.
///
/// # Safety
///
/// As `sem_clockwait`'s.
unsafe fn sem_wait_until(sem: *mut libc::sem_t, clock: libc::clockid_t, abstime: *const libc::timespec) -> c_int {
    type ClockWait = unsafe extern "C" fn(*mut libc::sem_t, libc::clockid_t, *const libc::timespec) -> c_int;
    let real = real!("sem_clockwait", ClockWait);
    crate::at_thread_wait();
    if !on_virtual_time() || abstime.is_null() {
        // SAFETY: libc's sem_clockwait with the caller's arguments.
        return unsafe { real(sem, clock, abstime) };
    }
    // SAFETY: a non-null abstime (sem_clockwait's contract).
    let left = unsafe { left_until_abs(clock, abstime) };
    // A post between chunks is not lost: the semaphore counts it.
    // SAFETY: libc's sem_clockwait with the caller's semaphore and a time of ours.
    match timed_abs(libc::CLOCK_MONOTONIC, left, |abs| match unsafe { real(sem, libc::CLOCK_MONOTONIC, abs) } {
        0 => Ok(0),
        _ if errno() == libc::ETIMEDOUT => Err(()),
        _ => Ok(errno()),
    }) {
        Some(0) => 0,
        Some(e) => {
            set_errno(e);
            -1
        }
        None => {
            set_errno(libc::ETIMEDOUT);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(sem: *mut libc::sem_t, abstime: *const libc::timespec) -> c_int {
    // SAFETY: sem_timedwait's contract is sem_clockwait's on CLOCK_REALTIME.
    unsafe { sem_wait_until(sem, libc::CLOCK_REALTIME, abstime) }
}

#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(
    sem: *mut libc::sem_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments, under sem_clockwait's contract.
    unsafe { sem_wait_until(sem, clock, abstime) }
}

/// The clock each condition variable made with attributes times out on
/// (by address; `pthread_cond_init`), for `pthread_cond_timedwait`, whose
/// deadline is on that clock. One not listed uses `CLOCK_REALTIME`.
static COND_CLOCKS: std::sync::Mutex<std::collections::BTreeMap<usize, libc::clockid_t>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn cond_clocks() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, libc::clockid_t>> {
    // A poisoned lock only means a panic elsewhere; the map is still usable.
    COND_CLOCKS.lock().unwrap_or_else(|e| e.into_inner())
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_init(
    cond: *mut libc::pthread_cond_t,
    attr: *const libc::pthread_condattr_t,
) -> c_int {
    type Init = unsafe extern "C" fn(*mut libc::pthread_cond_t, *const libc::pthread_condattr_t) -> c_int;
    type GetClock = unsafe extern "C" fn(*const libc::pthread_condattr_t, *mut libc::clockid_t) -> c_int;
    // SAFETY: libc's pthread_cond_init with the caller's arguments.
    let r = unsafe { real!("pthread_cond_init", Init)(cond, attr) };
    if r == 0 {
        let mut clock = libc::CLOCK_REALTIME;
        if !attr.is_null() {
            // SAFETY: the caller's initialised attributes, read by libc.
            unsafe { real!("pthread_condattr_getclock", GetClock)(attr, &mut clock) };
        }
        let mut clocks = cond_clocks();
        if clock == libc::CLOCK_REALTIME {
            clocks.remove(&(cond as usize));
        } else {
            clocks.insert(cond as usize, clock);
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_destroy(cond: *mut libc::pthread_cond_t) -> c_int {
    cond_clocks().remove(&(cond as usize));
    // SAFETY: libc's pthread_cond_destroy with the caller's argument.
    unsafe { real!("pthread_cond_destroy", unsafe extern "C" fn(*mut libc::pthread_cond_t) -> c_int)(cond) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_wait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
) -> c_int {
    type Wait = unsafe extern "C" fn(*mut libc::pthread_cond_t, *mut libc::pthread_mutex_t) -> c_int;
    let real = real!("pthread_cond_wait", Wait);
    // SAFETY: libc's pthread_cond_wait with the caller's arguments.
    blocking(|| unsafe { real(cond, mutex) })
}

/// A condition wait until `abstime` on `clock`, on virtual time. A chunk
/// that times out before the virtual deadline returns as a spurious wakeup
/// (which callers handle anyway: they look at their predicate and wait
/// again): a signal sent while the thread was between chunks would
/// otherwise be lost. Such a return is not activity for sts.
///
/// # Safety
///
/// As `pthread_cond_clockwait`'s.
unsafe fn cond_wait_until(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    type ClockWait = unsafe extern "C" fn(
        *mut libc::pthread_cond_t,
        *mut libc::pthread_mutex_t,
        libc::clockid_t,
        *const libc::timespec,
    ) -> c_int;
    let real = real!("pthread_cond_clockwait", ClockWait);
    crate::at_thread_wait();
    let Some(slot) = vtime::slot().filter(|_| !abstime.is_null()) else {
        // SAFETY: libc's pthread_cond_clockwait with the caller's arguments.
        return unsafe { real(cond, mutex, clock, abstime) };
    };
    // SAFETY: a non-null abstime (the contract).
    let left = unsafe { left_until_abs(clock, abstime) };
    if left == 0 {
        return libc::ETIMEDOUT;
    }
    vtime::enter_wait(&slot, vtime::virtual_now().saturating_add(left));
    let abs = vtime::timespec_of(real_now(libc::CLOCK_MONOTONIC).saturating_add(left.min(vtime::CHUNK_NS)));
    // SAFETY: libc's pthread_cond_clockwait with the caller's condition and
    // mutex, and a time of ours.
    let r = unsafe { real(cond, mutex, libc::CLOCK_MONOTONIC, &abs) };
    // SAFETY: as above.
    if r == libc::ETIMEDOUT && unsafe { left_until_abs(clock, abstime) } > 0 {
        slot.between_waits();
        return 0;
    }
    slot.woke();
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_timedwait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    abstime: *const libc::timespec,
) -> c_int {
    let clock = cond_clocks().get(&(cond as usize)).copied().unwrap_or(libc::CLOCK_REALTIME);
    // SAFETY: the caller's arguments; the deadline is on the condition's clock.
    unsafe { cond_wait_until(cond, mutex, clock, abstime) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_clockwait(
    cond: *mut libc::pthread_cond_t,
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { cond_wait_until(cond, mutex, clock, abstime) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(mutex: *mut libc::pthread_mutex_t) -> c_int {
    type Lock = unsafe extern "C" fn(*mut libc::pthread_mutex_t) -> c_int;
    let lock = real!("pthread_mutex_lock", Lock);
    if on_virtual_time() {
        // Most locks are free: only a lock that must wait is a wait.
        // SAFETY: libc's pthread_mutex_trylock with the caller's mutex.
        let r = unsafe { real!("pthread_mutex_trylock", Lock)(mutex) };
        if r != libc::EBUSY {
            return r;
        }
        // SAFETY: libc's pthread_mutex_lock with the caller's mutex.
        return blocking(|| unsafe { lock(mutex) });
    }
    // SAFETY: libc's pthread_mutex_lock with the caller's mutex.
    unsafe { lock(mutex) }
}

/// A mutex lock until `abstime` on `clock`, on virtual time.
///
/// # Safety
///
/// As `pthread_mutex_clocklock`'s.
unsafe fn mutex_lock_until(
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    type ClockLock = unsafe extern "C" fn(*mut libc::pthread_mutex_t, libc::clockid_t, *const libc::timespec) -> c_int;
    let real = real!("pthread_mutex_clocklock", ClockLock);
    if !on_virtual_time() || abstime.is_null() {
        // SAFETY: libc's pthread_mutex_clocklock with the caller's arguments.
        return unsafe { real(mutex, clock, abstime) };
    }
    // SAFETY: a non-null abstime (the contract).
    let left = unsafe { left_until_abs(clock, abstime) };
    // SAFETY: libc's pthread_mutex_clocklock with the caller's mutex and a time of ours.
    timed_abs(libc::CLOCK_MONOTONIC, left, |abs| match unsafe { real(mutex, libc::CLOCK_MONOTONIC, abs) } {
        libc::ETIMEDOUT => Err(()),
        r => Ok(r),
    })
    .unwrap_or(libc::ETIMEDOUT)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    mutex: *mut libc::pthread_mutex_t,
    abstime: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments; pthread_mutex_timedlock's deadline is
    // on CLOCK_REALTIME.
    unsafe { mutex_lock_until(mutex, libc::CLOCK_REALTIME, abstime) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    mutex: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { mutex_lock_until(mutex, clock, abstime) }
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(thread: libc::pthread_t, result: *mut *mut c_void) -> c_int {
    type Join = unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> c_int;
    // SAFETY: libc's pthread_join with the caller's arguments.
    blocking(|| unsafe { real!("pthread_join", Join)(thread, result) })
}

#[no_mangle]
pub unsafe extern "C" fn waitpid(pid: libc::pid_t, status: *mut c_int, options: c_int) -> libc::pid_t {
    type WaitPid = unsafe extern "C" fn(libc::pid_t, *mut c_int, c_int) -> libc::pid_t;
    let real = real!("waitpid", WaitPid);
    if options & libc::WNOHANG != 0 {
        // SAFETY: libc's waitpid with the caller's arguments.
        return unsafe { real(pid, status, options) };
    }
    // SAFETY: libc's waitpid with the caller's arguments.
    blocking(|| unsafe { real(pid, status, options) })
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: libc::size_t) -> libc::ssize_t {
    type Read = unsafe extern "C" fn(c_int, *mut c_void, libc::size_t) -> libc::ssize_t;
    // SAFETY: libc's read with the caller's arguments.
    blocking(|| unsafe { real!("read", Read)(fd, buf, count) })
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: libc::size_t, flags: c_int) -> libc::ssize_t {
    type Recv = unsafe extern "C" fn(c_int, *mut c_void, libc::size_t, c_int) -> libc::ssize_t;
    let real = real!("recv", Recv);
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: libc's recv with the caller's arguments.
        return unsafe { real(fd, buf, len, flags) };
    }
    // SAFETY: libc's recv with the caller's arguments.
    blocking(|| unsafe { real(fd, buf, len, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: libc::size_t,
    flags: c_int,
    addr: *mut libc::sockaddr,
    addrlen: *mut libc::socklen_t,
) -> libc::ssize_t {
    type RecvFrom = unsafe extern "C" fn(
        c_int,
        *mut c_void,
        libc::size_t,
        c_int,
        *mut libc::sockaddr,
        *mut libc::socklen_t,
    ) -> libc::ssize_t;
    let real = real!("recvfrom", RecvFrom);
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: libc's recvfrom with the caller's arguments.
        return unsafe { real(fd, buf, len, flags, addr, addrlen) };
    }
    // SAFETY: libc's recvfrom with the caller's arguments.
    blocking(|| unsafe { real(fd, buf, len, flags, addr, addrlen) })
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> libc::ssize_t {
    type RecvMsg = unsafe extern "C" fn(c_int, *mut libc::msghdr, c_int) -> libc::ssize_t;
    let real = real!("recvmsg", RecvMsg);
    if flags & libc::MSG_DONTWAIT != 0 {
        // SAFETY: libc's recvmsg with the caller's arguments.
        return unsafe { real(fd, msg, flags) };
    }
    // SAFETY: libc's recvmsg with the caller's arguments.
    blocking(|| unsafe { real(fd, msg, flags) })
}

#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
    type Accept = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    // SAFETY: libc's accept with the caller's arguments.
    blocking(|| unsafe { real!("accept", Accept)(fd, addr, len) })
}

#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
    flags: c_int,
) -> c_int {
    type Accept4 = unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int;
    // SAFETY: libc's accept4 with the caller's arguments.
    blocking(|| unsafe { real!("accept4", Accept4)(fd, addr, len, flags) })
}

/// `syscall(2)`: futex waits on virtual time; everything else passes through.
///
/// `syscall` is variadic; on the 64-bit Linux ABIs sts runs on (x86-64,
/// AArch64) variadic integer arguments travel exactly as fixed ones, so six
/// fixed `long`s after the number receive whatever the caller passed (the
/// unused ones are never read by the kernel for the call made).
#[no_mangle]
pub unsafe extern "C" fn syscall(
    number: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    type Syscall = unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    let real = real!("syscall", Syscall);
    if number != libc::SYS_futex || !on_virtual_time() {
        // SAFETY: libc's syscall with the caller's arguments.
        return unsafe { real(number, a, b, c, d, e, f) };
    }
    let op = b as c_int & libc::FUTEX_CMD_MASK;
    let waits = matches!(op, libc::FUTEX_WAIT | libc::FUTEX_WAIT_BITSET);
    if !waits {
        if matches!(op, libc::FUTEX_LOCK_PI | libc::FUTEX_LOCK_PI2 | libc::FUTEX_WAIT_REQUEUE_PI) {
            // SAFETY: libc's syscall with the caller's arguments.
            return blocking(|| unsafe { real(number, a, b, c, d, e, f) });
        }
        // SAFETY: libc's syscall with the caller's arguments.
        return unsafe { real(number, a, b, c, d, e, f) };
    }
    let timeout = d as *const libc::timespec;
    if timeout.is_null() {
        // SAFETY: libc's syscall with the caller's arguments.
        return blocking(|| unsafe { real(number, a, b, c, d, e, f) });
    }
    let realtime = b as c_int & libc::FUTEX_CLOCK_REALTIME != 0;
    let clock = if realtime { libc::CLOCK_REALTIME } else { libc::CLOCK_MONOTONIC };
    // FUTEX_WAIT's timeout is relative; FUTEX_WAIT_BITSET's absolute.
    // SAFETY: a non-null timeout points to a timespec (futex's contract).
    let left =
        if op == libc::FUTEX_WAIT { ns_of(unsafe { &*timeout }) } else { unsafe { left_until_abs(clock, timeout) } };
    // The chunks: a relative wait for FUTEX_WAIT, an absolute one otherwise.
    let mut result = None;
    vtime::wait(Some(left), |chunk| {
        let chunk = chunk.unwrap_or(0);
        let ts = if op == libc::FUTEX_WAIT {
            vtime::timespec_of(chunk)
        } else {
            vtime::timespec_of(real_now(clock).saturating_add(chunk))
        };
        // A wake between chunks is not lost: the waker changed the word
        // first, so the next chunk returns EAGAIN at once.
        // SAFETY: libc's syscall with the caller's futex and a timeout of ours.
        let r = unsafe { real(number, a, b, c, &ts as *const libc::timespec as c_long, e, f) };
        if r == -1 && errno() == libc::ETIMEDOUT {
            return 0;
        }
        result = Some((r, errno()));
        1
    });
    match result {
        Some((r, e)) => {
            set_errno(e);
            r
        }
        None => {
            set_errno(libc::ETIMEDOUT);
            -1
        }
    }
}

/// Records that this thread armed a timer sts cannot move with virtual time.
fn refuse(code: u64) {
    if let Some(page) = vtime::page() {
        page.refuse(code, vtime::gettid());
    }
}

#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: libc::socklen_t,
) -> c_int {
    type SetSockOpt = unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, libc::socklen_t) -> c_int;
    if level == libc::SOL_SOCKET
        && matches!(name, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO)
        && !value.is_null()
        && len as usize >= std::mem::size_of::<libc::timeval>()
    {
        // SAFETY: a non-null value of at least a timeval's size (the option's type).
        let tv = unsafe { std::ptr::read_unaligned(value.cast::<libc::timeval>()) };
        if tv.tv_sec != 0 || tv.tv_usec != 0 {
            refuse(sts_clockpage::refusal::SOCKET_TIMEOUT);
        }
    }
    // SAFETY: libc's setsockopt with the caller's arguments.
    unsafe { real!("setsockopt", SetSockOpt)(fd, level, name, value, len) }
}

#[no_mangle]
pub unsafe extern "C" fn timerfd_settime(
    fd: c_int,
    flags: c_int,
    new: *const libc::itimerspec,
    old: *mut libc::itimerspec,
) -> c_int {
    type Set = unsafe extern "C" fn(c_int, c_int, *const libc::itimerspec, *mut libc::itimerspec) -> c_int;
    // SAFETY: a non-null new value points to an itimerspec (the contract).
    if !new.is_null() && ns_of(unsafe { &(*new).it_value }) != 0 {
        refuse(sts_clockpage::refusal::TIMERFD);
    }
    // SAFETY: libc's timerfd_settime with the caller's arguments.
    unsafe { real!("timerfd_settime", Set)(fd, flags, new, old) }
}

#[no_mangle]
pub unsafe extern "C" fn timer_settime(
    timer: libc::timer_t,
    flags: c_int,
    new: *const libc::itimerspec,
    old: *mut libc::itimerspec,
) -> c_int {
    type Set = unsafe extern "C" fn(libc::timer_t, c_int, *const libc::itimerspec, *mut libc::itimerspec) -> c_int;
    // SAFETY: a non-null new value points to an itimerspec (the contract).
    if !new.is_null() && ns_of(unsafe { &(*new).it_value }) != 0 {
        refuse(sts_clockpage::refusal::POSIX_TIMER);
    }
    // SAFETY: libc's timer_settime with the caller's arguments.
    unsafe { real!("timer_settime", Set)(timer, flags, new, old) }
}

#[no_mangle]
pub unsafe extern "C" fn setitimer(which: c_int, new: *const libc::itimerval, old: *mut libc::itimerval) -> c_int {
    type Set = unsafe extern "C" fn(c_int, *const libc::itimerval, *mut libc::itimerval) -> c_int;
    // SAFETY: a non-null new value points to an itimerval (the contract).
    if which == libc::ITIMER_REAL && !new.is_null() && {
        let v = unsafe { &(*new).it_value };
        v.tv_sec != 0 || v.tv_usec != 0
    } {
        refuse(sts_clockpage::refusal::ITIMER);
    }
    // SAFETY: libc's setitimer with the caller's arguments.
    unsafe { real!("setitimer", Set)(which, new, old) }
}

#[no_mangle]
pub unsafe extern "C" fn alarm(seconds: std::ffi::c_uint) -> std::ffi::c_uint {
    if seconds != 0 {
        refuse(sts_clockpage::refusal::ITIMER);
    }
    // SAFETY: libc's alarm with the caller's argument.
    unsafe { real!("alarm", unsafe extern "C" fn(std::ffi::c_uint) -> std::ffi::c_uint)(seconds) }
}
