//! Parking a threaded controller whole, and bringing its threads back in
//! every copy (issue 37, `docs/snapshots.md`).
//!
//! `fork` copies only the calling thread. So that a threaded controller can
//! still be parked once it listens, like a single-threaded one, the thread
//! that becomes the zygote first parks every other thread of the process
//! *inside a signal handler*: each is interrupted in the blocking system
//! call it sleeps in (a lock, a queue, `poll` on its socket), and its
//! interrupted context (every register, the signal mask, the FPU state) is
//! the signal frame the kernel wrote on its own stack. A copy forked from the
//! zygote has that stack too; for each parked thread it clones a new kernel
//! thread on the old thread's TLS and stack, and the new thread returns from
//! the old one's signal frame (`rt_sigreturn`). The controller sees what a
//! signal with an `SA_RESTART` handler does to a blocking call: a read, an
//! `accept`, a lock goes on sleeping; a wait with a timeout (`poll`, a timed
//! semaphore) ends with `EINTR` and is called again. Nothing else of the
//! thread changed: its TLS, its `pthread_t`, its stack, its interpreter state
//! are the same memory.
//!
//! A thread is parked only where that is sound: the process must be
//! quiescent (every other thread sleeping in the kernel, `S` in
//! `/proc/self/task/*/stat`), and each thread's handler checks that it
//! interrupted a system call ([`in_interrupted_syscall`]). A thread sleeping
//! in a system call holds no lock of libc's allocator that the zygote's
//! `fork` takes; a lock it does hold (its stdio stream's, a mutex of the
//! program's) it still holds when it comes back: it is the same thread to
//! libc, which knows a lock's owner by its control block. Anything else
//! (a thread that woke up meanwhile, one that blocks the signal) releases
//! every parked thread, and parking is tried again at a later wait.
//!
//! x86-64 only (the register names and the `rt_sigreturn` frame are its);
//! elsewhere the shim parks a threaded controller before its first thread,
//! as it did before (`deferred`).

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use crate::vtime;

/// Most threads a zygote parks (c65faucet has 14).
const MAX_PARKED: usize = 256;

/// One parked thread, as its copy brings it back.
#[derive(Clone, Copy)]
struct Parked {
    /// Its interrupted context: the `ucontext_t` of the signal frame on its stack.
    context: usize,
    /// Its thread control block: libc's `pthread_t`, and its TLS base.
    tcb: usize,
    /// It slept in a blocking call without a deadline that libc repeats by
    /// itself after `EINTR` (`pthread_cond_wait`, a contended mutex ...).
    waiting: bool,
    /// It is the process's first thread (its id is the pid): the one a
    /// signal sent to the process goes to first.
    leader: bool,
    /// Its clock slot in the copy (set by the copy before cloning it).
    slot: usize,
    /// Its robust futex list, which the kernel keeps per thread.
    robust_head: usize,
    robust_len: usize,
    /// Where to register its restartable-sequence area, and its size (0:
    /// none; set by the copy before cloning it).
    rseq: usize,
    rseq_len: u32,
}

const NONE: Parked = Parked {
    context: 0,
    tcb: 0,
    waiting: false,
    leader: false,
    slot: usize::MAX,
    robust_head: 0,
    robust_len: 0,
    rseq: 0,
    rseq_len: 0,
};

/// The parked threads (written by their handlers, each its own entry).
struct Table(UnsafeCell<[Parked; MAX_PARKED]>);

// SAFETY: each entry is written by one handler only, at an index it alone
// reserved (`TAKEN`), and read only after `FILLED` says it was written.
unsafe impl Sync for Table {}

static TABLE: Table = Table(UnsafeCell::new([NONE; MAX_PARKED]));
/// Indices handed out by the handlers of the current attempt.
static TAKEN: AtomicUsize = AtomicUsize::new(0);
/// Entries written (the thread is parked).
static FILLED: AtomicUsize = AtomicUsize::new(0);
/// Handlers that declined (their thread was not in a system call).
static DECLINED: AtomicUsize = AtomicUsize::new(0);
/// True while an attempt takes threads: a signal that comes later is ignored.
static OPEN: AtomicBool = AtomicBool::new(false);
/// Parked handlers sleep while this keeps the value they saw; a failed
/// attempt bumps it to let them go.
static ROUND: AtomicU32 = AtomicU32::new(0);
/// How many threads the zygote parked for good (read by its copies).
static PARKED: AtomicUsize = AtomicUsize::new(0);
/// Where libc keeps a thread's kernel id in its control block.
static TID_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// The signal that parks a thread: a real-time one no controller we know uses
/// (libc takes the first two for itself).
fn signal() -> c_int {
    libc::SIGRTMAX() - 3
}

thread_local! {
    /// Set while the thread is in a blocking call libc repeats after EINTR.
    static IN_BLOCKING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `call`, marked as a blocking call for a parked thread's copy.
pub fn marked_blocking<T>(call: impl FnOnce() -> T) -> T {
    IN_BLOCKING.with(|b| b.set(true));
    let r = call();
    IN_BLOCKING.with(|b| b.set(false));
    r
}

/// System calls the kernel restarts after a handler with `SA_RESTART`
/// (rewinding to the `syscall` instruction), that a thread sleeps in: reads
/// and writes, `accept`, `connect`, `wait4`, a lock (`fcntl`, `flock`) and a
/// `futex` wait without timeout (a semaphore, a lock, a condition).
const RESTARTED_WAITS: &[i64] = &[0, 1, 17, 19, 20, 42, 43, 44, 45, 46, 47, 61, 72, 73, 202, 288];

/// True if `context` was interrupted in a system call: either just after a
/// `syscall` instruction the signal ended with `EINTR` (a wait with a
/// timeout, `poll` and the like), or at a `syscall` instruction the kernel
/// rewound to restart one of [`RESTARTED_WAITS`]. Anything else means the
/// thread ran user code (and might hold a lock of libc's that `fork` takes).
fn in_interrupted_syscall(context: &libc::ucontext_t) -> bool {
    let rip = context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize;
    let rax = context.uc_mcontext.gregs[libc::REG_RAX as usize];
    if rax == -(libc::EINTR as i64) {
        // The instruction's two bytes are on rip's page (or rip is at a
        // page's start, and the check is left out rather than read across).
        if rip % 4096 < 2 {
            return false;
        }
        // SAFETY: rip is in mapped code the thread was running, and the two
        // bytes before it are on the same page (checked above).
        return unsafe { std::ptr::read((rip - 2) as *const [u8; 2]) } == [0x0f, 0x05];
    }
    // SAFETY: rip is the mapped instruction the thread resumes at.
    let first = unsafe { std::ptr::read(rip as *const u8) };
    // 0x0f opens a two-byte opcode, mapped whole like any instruction.
    // SAFETY: the second byte of that instruction.
    RESTARTED_WAITS.contains(&rax) && first == 0x0f && unsafe { std::ptr::read((rip + 1) as *const u8) } == 0x05
}

extern "C" fn on_park(_signal: c_int, _info: *mut libc::siginfo_t, context: *mut c_void) {
    let round = ROUND.load(Ordering::Acquire);
    if !OPEN.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: the kernel passes the interrupted context of this thread.
    let uc = unsafe { &*(context as *const libc::ucontext_t) };
    if !in_interrupted_syscall(uc) {
        DECLINED.fetch_add(1, Ordering::AcqRel);
        return;
    }
    let i = TAKEN.fetch_add(1, Ordering::AcqRel);
    if i >= MAX_PARKED {
        DECLINED.fetch_add(1, Ordering::AcqRel);
        return;
    }
    let (mut robust_head, mut robust_len) = (0usize, 0usize);
    // SAFETY: get_robust_list for this thread (0) into our own words.
    unsafe { libc::syscall(libc::SYS_get_robust_list, 0, &mut robust_head, &mut robust_len) };
    let entry = Parked {
        context: context as usize,
        // SAFETY: pthread_self has no preconditions.
        tcb: unsafe { libc::pthread_self() } as usize,
        waiting: IN_BLOCKING.with(|b| b.get()),
        // SAFETY: getpid has no preconditions.
        leader: vtime::gettid() == unsafe { libc::getpid() } as u64,
        robust_head,
        robust_len,
        ..NONE
    };
    // SAFETY: index `i` is this handler's alone (TAKEN), nobody reads it
    // before FILLED counts it.
    unsafe { (*TABLE.0.get())[i] = entry };
    FILLED.fetch_add(1, Ordering::AcqRel);
    while ROUND.load(Ordering::Acquire) == round {
        // SAFETY: a futex wait on our own word while it holds `round`.
        unsafe {
            libc::syscall(libc::SYS_futex, ROUND.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, round, 0usize)
        };
    }
}

/// The scheduler state letter of thread `tid` of this process.
fn state_of(tid: &str) -> Option<u8> {
    let stat = std::fs::read(format!("/proc/self/task/{tid}/stat")).ok()?;
    // The state follows the command name, which ends with the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    stat.get(close + 2).copied()
}

/// Why the other threads were not parked.
pub enum NotParked {
    /// Some thread is running: try again at a later wait.
    NotYet,
    /// An attempt failed (a thread declined or never answered); the others
    /// were let go.
    Failed(String),
}

/// Sleeps `ns` nanoseconds without the shim's hooks (no virtual time, no
/// parking from inside the parking).
fn nap(ns: u64) {
    let ts = vtime::timespec_of(ns);
    // SAFETY: a plain nanosleep on our own timespec.
    unsafe { libc::syscall(libc::SYS_nanosleep, &ts, std::ptr::null_mut::<libc::timespec>()) };
}

/// Parks every other thread of the process in its signal handler, if all
/// sleep in the kernel. Returns how many were parked; they stay parked for
/// good (this process becomes the zygote).
pub fn park_others() -> Result<usize, NotParked> {
    let me = vtime::gettid().to_string();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Err(NotParked::NotYet) };
    let others: Vec<String> =
        tasks.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|t| *t != me).collect();
    if others.len() > MAX_PARKED {
        return Err(NotParked::Failed(format!("{} threads, more than {MAX_PARKED}", others.len() + 1)));
    }
    if others.iter().any(|t| state_of(t) != Some(b'S')) {
        return Err(NotParked::NotYet);
    }
    let offset = tid_offset().ok_or_else(|| NotParked::Failed("libc's thread id not found in its TCB".into()))?;
    TID_OFFSET.store(offset, Ordering::Release);
    // SAFETY: sigaction is a plain C struct, valid all zero; the handler
    // runs with every signal blocked, so nothing else interrupts a parked
    // thread; SA_RESTART, so that a copy restarts what can be restarted (a
    // program need not expect EINTR from `accept` because sts parked it).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_park as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigfillset(&mut action.sa_mask);
        if libc::sigaction(signal(), &action, std::ptr::null_mut()) != 0 {
            return Err(NotParked::Failed("cannot install the parking signal's handler".into()));
        }
    }
    TAKEN.store(0, Ordering::Release);
    FILLED.store(0, Ordering::Release);
    DECLINED.store(0, Ordering::Release);
    OPEN.store(true, Ordering::Release);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    for t in &others {
        let tid: libc::pid_t = t.parse().unwrap_or(0);
        // SAFETY: tgkill to a thread of our own process.
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal()) };
    }
    // A parked thread answers within microseconds; 200 ms is for a loaded machine.
    let mut waited = 0;
    while FILLED.load(Ordering::Acquire) + DECLINED.load(Ordering::Acquire) < others.len() && waited < 200_000_000 {
        nap(50_000);
        waited += 50_000;
    }
    let (filled, declined) = (FILLED.load(Ordering::Acquire), DECLINED.load(Ordering::Acquire));
    if filled == others.len() && declined == 0 {
        OPEN.store(false, Ordering::Release);
        PARKED.store(filled, Ordering::Release);
        return Ok(filled);
    }
    // Let every parked thread go (their calls end with EINTR), and give late
    // handlers time to see that the attempt is over.
    OPEN.store(false, Ordering::Release);
    ROUND.fetch_add(1, Ordering::AcqRel);
    // SAFETY: a futex wake on our own word.
    unsafe { libc::syscall(libc::SYS_futex, ROUND.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, c_int::MAX) };
    nap(5_000_000);
    Err(NotParked::Failed(format!(
        "{} of {} threads parked, {declined} were not asleep in a system call",
        filled,
        others.len()
    )))
}

/// Where libc keeps a thread's kernel id in its control block: the one
/// place in the calling thread's TCB that holds its id.
fn tid_offset() -> Option<usize> {
    let tid = vtime::gettid() as i32;
    // SAFETY: pthread_self has no preconditions.
    let tcb = unsafe { libc::pthread_self() } as usize;
    let found: Vec<usize> = (0..2048)
        .step_by(4)
        // SAFETY: libc's TCB (struct pthread) is larger than 2 KiB and
        // mapped; read as plain 4-byte words.
        .filter(|o| unsafe { std::ptr::read((tcb + o) as *const i32) } == tid)
        .collect();
    (found.len() == 1).then(|| found[0])
}

/// How many threads this copy brings back (those its zygote parked).
pub fn parked() -> usize {
    PARKED.load(Ordering::Acquire)
}

/// In a copy just forked from a zygote that parked threads: brings each back
/// as a new kernel thread of this process, on its own TLS and stack, with a
/// clock slot of its own if the copy runs on virtual time. Returns how many
/// came back, or what failed.
///
/// # Safety
///
/// A fresh copy of the zygote (one thread, the parked threads' memory as
/// they left it), called once.
pub unsafe fn bring_back() -> Result<usize, String> {
    let n = parked();
    let offset = TID_OFFSET.load(Ordering::Acquire);
    // SAFETY: the handlers wrote entries 0..n before the zygote forked; this
    // copy is single-threaded until the clones below.
    let table = &mut unsafe { &mut *TABLE.0.get() }[..n];
    // The process's first thread first: see `keep_signals_off`.
    table.sort_by_key(|e| !e.leader);
    let leader_parked = table.first().is_some_and(|e| e.leader);
    // No signal may reach a new thread before its context is back: block
    // them all around the clones (each new thread then takes its own mask
    // from its frame).
    // SAFETY: sigset_t is plain data; pthread_sigmask on our own sets.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u64;
    let (rseq_offset, rseq_len) = rseq_area();
    let mut result = Ok(n);
    for entry in table.iter_mut() {
        entry.slot = usize::MAX;
        (entry.rseq, entry.rseq_len) = ((entry.tcb as isize + rseq_offset) as usize, rseq_len);
        if let Some(page) = vtime::page() {
            match page.claim(pid, vtime::gettid(), vtime::thread_gone) {
                Some((i, slot)) => {
                    entry.slot = i;
                    if entry.waiting {
                        vtime::enter_wait(&slot, sts_clockpage::NO_DEADLINE);
                    }
                }
                None => page.refuse(sts_clockpage::refusal::NO_SLOT, vtime::gettid()),
            }
        }
        // SAFETY: `entry` describes a thread parked by this process's zygote
        // whose memory this copy has; the clone runs on its TLS and stack.
        let tid = unsafe { clone_into(entry, offset) };
        if tid < 0 {
            result =
                Err(format!("cannot bring a parked thread back: {}", std::io::Error::from_raw_os_error(-tid as i32)));
            break;
        }
    }
    if leader_parked {
        keep_signals_off(&mut old);
    }
    // SAFETY: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if result.is_ok() && n > 0 {
        vtime::note_thread_started();
    }
    result
}

/// The first code of a thread brought back: takes its clock slot, then
/// returns from its old signal frame into the call it was parked in.
extern "C" fn resumed(entry: *const Parked) -> ! {
    // SAFETY: `bring_back` passes an entry of the table, which lives forever.
    let entry = unsafe { *entry };
    // SAFETY: registering this thread's own robust list and rseq area, as
    // libc did when it started the thread (neither survives a new clone);
    // a failure leaves the thread as libc runs it without them.
    unsafe {
        libc::syscall(libc::SYS_set_robust_list, entry.robust_head, entry.robust_len);
        if entry.rseq_len > 0 {
            libc::syscall(libc::SYS_rseq, entry.rseq, entry.rseq_len, 0, RSEQ_SIGNATURE);
        }
    }
    if entry.slot != usize::MAX {
        if let Some(page) = vtime::page() {
            page.slot(entry.slot).hand_to(vtime::gettid());
        }
    }
    vtime::set_slot(entry.slot);
    // SAFETY: `context` is the ucontext of the kernel's signal frame on this
    // thread's stack; rt_sigreturn with the stack pointer there restores
    // every register, the mask and the FPU state from it, as the end of the
    // handler would have.
    unsafe {
        std::arch::asm!(
            "mov rsp, {0}",
            "mov eax, 15",
            "syscall",
            "ud2",
            in(reg) entry.context,
            options(noreturn)
        )
    }
}

/// Clones a kernel thread onto `entry`'s TLS and stack that runs
/// [`resumed`]. Returns its id, or a negative errno.
///
/// # Safety
///
/// As [`bring_back`]; `entry` lives as long as the process.
unsafe fn clone_into(entry: &Parked, tid_offset: usize) -> i64 {
    let flags = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;
    // libc's own field for the thread's id: set to the new id before the
    // thread runs, cleared by the kernel when it ends (pthread_join waits on it).
    let tid_field = entry.tcb + tid_offset;
    // The new thread's first calls run below the signal frame, where the
    // parked handler's own frames were: dead memory in this copy.
    let stack = (entry.context - 4096) & !15;
    let ret: i64;
    // SAFETY: the clone system call; in the child (rax = 0) the stack
    // pointer is `stack`, 16-byte aligned, and `call` enters `resumed`
    // with the ABI's alignment; it never returns. The parent only gets the
    // result.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone => ret,
            in("rdi") flags,
            in("rsi") stack,
            in("rdx") tid_field,
            in("r10") tid_field,
            in("r8") entry.tcb,
            in("r12") entry as *const Parked,
            in("r13") resumed as *const () as usize,
            lateout("rcx") _,
            lateout("r11") _,
        );
    }
    ret
}

/// The signature libc registers its restartable sequences with (x86-64).
const RSEQ_SIGNATURE: u32 = 0x5305_3053;

/// Where libc keeps a thread's rseq area (offset from its thread pointer)
/// and its size; size 0 if this libc registers none (before glibc 2.35, or
/// switched off).
fn rseq_area() -> (isize, u32) {
    // SAFETY: dlsym with valid names; the symbols, when glibc exports them,
    // are a `ptrdiff_t` and an `unsigned int` it never changes after start.
    unsafe {
        let offset = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        if offset.is_null() || size.is_null() {
            return (0, 0);
        }
        (*(offset as *const isize), *(size as *const u32))
    }
}

/// Forks the process with its threads parked: a plain `fork` system call,
/// without libc's `fork`. libc's would prepare the child for a life with
/// one thread (forget the other threads' stacks and thread-specific data,
/// detach them from their malloc arenas, count one thread) and run the
/// program's `pthread_atfork` handlers, which do the same; but the parked
/// threads come back in every copy. Only what libc does for the calling
/// thread is done here: its id in its control block, and its robust list.
///
/// # Safety
///
/// Every other thread is parked by [`park_others`], so no lock of libc's
/// (the allocator's, stdio's list) is held while the memory is copied.
pub unsafe fn fork_whole() -> libc::pid_t {
    // SAFETY: pthread_self has no preconditions.
    let tid_field = unsafe { libc::pthread_self() } as usize + TID_OFFSET.load(Ordering::Acquire);
    let (mut head, mut len) = (0usize, 0usize);
    // SAFETY: get_robust_list for this thread into our own words; clone as
    // fork (no CLONE_VM, no new stack: the child returns here on its copy of
    // this stack), writing the child's id into its copy of libc's field.
    unsafe {
        libc::syscall(libc::SYS_get_robust_list, 0, &mut head, &mut len);
        let pid = libc::syscall(
            libc::SYS_clone,
            (libc::SIGCHLD | libc::CLONE_CHILD_SETTID) as libc::c_ulong,
            0usize,
            0usize,
            tid_field,
            0usize,
        ) as libc::pid_t;
        if pid == 0 {
            libc::syscall(libc::SYS_set_robust_list, head, len);
            vtime::slot_for_child();
        }
        pid
    }
}

/// The signals a process is sent as a whole (by `kill`, a terminal, a timer).
fn process_signals() -> impl Iterator<Item = c_int> {
    [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGCHLD,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGURG,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGWINCH,
        libc::SIGIO,
        libc::SIGPWR,
    ]
    .into_iter()
    .chain((libc::SIGRTMIN()..=libc::SIGRTMAX()).filter(|&s| s != signal()))
}

/// Adds the signals a process is sent as a whole to `mask`, the mask this
/// thread (the copy's first) will run with. Used when a thread other than
/// the zygote's first parked the others: the copy's first thread, whose id
/// is the pid and which the kernel offers such a signal to first, is then
/// not the controller's first thread. Python runs signal handlers in its
/// main thread only; with this thread refusing them, the kernel offers them
/// to the next thread, the controller's first, brought back first. Signals
/// a thread is sent itself (a fault, `pthread_kill`, libc's own) are left as
/// they were.
fn keep_signals_off(mask: &mut libc::sigset_t) {
    for s in process_signals() {
        // SAFETY: sigaddset on our own set with a valid signal number.
        unsafe { libc::sigaddset(mask, s) };
    }
}
