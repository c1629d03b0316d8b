//! The clock abstraction: the only place the orchestrator reads time.
//!
//! Everything downstream (the mock network's timeouts, trace timestamps) sees
//! milliseconds since the run started, taken from a [`Clock`]. A clock runs on
//! real time, or on *virtual time* ([`VirtualTime`],
//! `docs/virtual-time.md`): real time plus an offset shared with the run's
//! controllers through a clock page, which sts raises to the next timer
//! whenever the whole run is idle.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sts_clockpage::{Page, NO_DEADLINE, WAITING};

use super::announce::{Listener, Mapping};
use super::kernelq::KernelQueues;

/// Milliseconds since the start of a run.
pub type Millis = u64;

const NS_PER_MS: u64 = 1_000_000;

/// Where the kernel does not show its network queues ([`KernelQueues`]):
/// real time a run must have looked idle (no process woke, no message moved)
/// before virtual time jumps, a margin for a write whose delivery the kernel
/// put off (loopback traffic handed to `ksoftirqd`).
const IDLE_QUIET: Duration = Duration::from_micros(500);
/// Where the kernel does not show its network queues: looks in a row that
/// must agree, each after sts's loop has yielded (so its connection tasks
/// have read and written what was ready).
const IDLE_LOOKS: u32 = 3;
/// How soon to look again after a look that no wait entered will follow up:
/// sts's own connections or the kernel's queue still had something, which
/// takes microseconds.
pub const RETRY_SOON: Duration = Duration::from_micros(200);
/// How soon to look again otherwise, if no wait is entered before: a thread
/// seen runnable inside one of the shim's wait chunks, or one gone, is
/// noticed this late at most.
pub const RETRY_LATER: Duration = Duration::from_millis(1);

/// How long a controller thread may sleep (kernel state `S`) outside every
/// wait the shim knows before sts calls its wait invisible and stops time
/// from jumping for the run, naming the thread and its system call. Time does
/// not jump while such a thread looks busy anyway; the limit only decides
/// when to say so.
const INVISIBLE_AFTER: Duration = Duration::from_secs(2);

/// How often the idle test reads the kernel states of threads whose slots
/// say busy (to find them gone, or asleep in a wait the shim cannot see):
/// their states cannot make the run idle, so they need not be read at every
/// look.
const BUSY_LOOKS_EVERY: Duration = Duration::from_millis(20);

/// Nanoseconds of the real monotonic clock (the controllers' base too).
fn real_monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn real_wall_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME is always available");
    t.tv_sec().max(0) as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Milliseconds since the Unix epoch, by the wall clock: for stamping
/// records a person reads (a server's job times), never for a run's timing.
pub fn unix_time_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| d.as_millis() as i64)
}

/// A run's clock.
#[derive(Debug, Clone)]
pub struct Clock {
    /// Virtual monotonic nanoseconds at the clock's zero.
    start_ns: u64,
    /// Real monotonic nanoseconds at the clock's zero.
    real_start_ns: u64,
    virt: Option<Arc<VirtualTime>>,
}

impl Clock {
    /// A real-time clock whose zero is now.
    pub fn start() -> Clock {
        let now = real_monotonic_ns();
        Clock { start_ns: now, real_start_ns: now, virt: None }
    }

    /// A clock on `virt`'s virtual time whose zero is now.
    pub fn start_virtual(virt: Arc<VirtualTime>) -> Clock {
        Clock { start_ns: virt.now_ns(), real_start_ns: real_monotonic_ns(), virt: Some(virt) }
    }

    fn now_ns(&self) -> u64 {
        self.virt.as_ref().map_or_else(real_monotonic_ns, |v| v.now_ns())
    }

    /// Milliseconds since the clock started.
    pub fn now(&self) -> Millis {
        (self.now_ns() - self.start_ns) / NS_PER_MS
    }

    /// This clock as a shareable reading function (for the standalone proxy,
    /// which reads no clock of its own).
    pub fn now_fn(&self) -> std::sync::Arc<dyn Fn() -> Millis + Send + Sync> {
        let clock = self.clone();
        std::sync::Arc::new(move || clock.now())
    }

    /// The tokio instant at which this clock will read `ms`, if time does
    /// not jump before (for deadlines).
    pub fn instant_at(&self, ms: Millis) -> tokio::time::Instant {
        let left = (self.start_ns + ms * NS_PER_MS).saturating_sub(self.now_ns());
        tokio::time::Instant::now() + Duration::from_nanos(left)
    }

    /// The virtual time this clock runs on, if any.
    pub fn virtual_time(&self) -> Option<&Arc<VirtualTime>> {
        self.virt.as_ref()
    }

    /// On virtual time, one line on how much time it saved, e.g.
    /// `virtual time: 36.2 s in 1.40 s of real time (152 jumps)`.
    pub fn summary(&self) -> Option<String> {
        let v = self.virt.as_ref()?;
        let secs = |ns: u64| ns as f64 / 1e9;
        Some(format!(
            "virtual time: {:.1} s in {:.2} s of real time ({} jumps)",
            secs(self.now_ns() - self.start_ns),
            secs(real_monotonic_ns() - self.real_start_ns),
            v.jumps()
        ))
    }

    /// Moves virtual time to `target` (ms on this clock) if the whole run is
    /// idle until then: every controller process waits, with its next timer
    /// later than now, and nothing is in flight (`activity` counts what sts
    /// itself did). Jumps to the earliest controller timer if that comes
    /// first. Returns whether time jumped. Always false on real time. For a
    /// caller with no connections of its own; see [`Clock::jump_if_idle_with`].
    pub fn jump_if_idle(&self, target: Millis, activity: u64) -> bool {
        self.jump_if_idle_with(target, activity, &|| true)
    }

    /// [`Clock::jump_if_idle`] for a caller with connections to the
    /// controllers: `sts_quiet` says that none of them has anything in flight
    /// on sts's side (nothing queued for a controller that is not written
    /// yet, nothing received that is not read yet), asked between the idle
    /// test's two looks.
    pub fn jump_if_idle_with(&self, target: Millis, activity: u64, sts_quiet: &dyn Fn() -> bool) -> bool {
        self.virt.as_ref().is_some_and(|v| v.jump_if_idle(self.start_ns + target * NS_PER_MS, activity, sts_quiet))
    }

    /// True when the run is quiescent (see [`VirtualTime::is_idle`]). Always
    /// false on real time, where sts cannot tell.
    pub fn is_idle(&self, activity: u64, sts_quiet: &dyn Fn() -> bool) -> bool {
        self.virt.as_ref().is_some_and(|v| v.is_idle(activity, sts_quiet))
    }

    /// When the run is quiescent ([`Clock::is_idle`]): the time (ms on this
    /// clock, rounded up) of the earliest controller timer, `Millis::MAX`
    /// when no controller waits with a timeout. No controller can act before
    /// then unless sts gives it something. `None` when the run is not
    /// quiescent, and always on real time.
    pub fn idle_until(&self, activity: u64, sts_quiet: &dyn Fn() -> bool) -> Option<Millis> {
        let (earliest, _) = self.virt.as_ref()?.idle_until(u64::MAX, activity, sts_quiet)?;
        Some(match earliest {
            u64::MAX => Millis::MAX,
            ns => ns.saturating_sub(self.start_ns).div_ceil(NS_PER_MS),
        })
    }
}

/// What the idle detector saw last, to tell "still idle" from "idle again"
/// (where the kernel's queues cannot be read, [`IDLE_QUIET`]).
struct IdleWatch {
    seen: Vec<(u64, u64)>,
    activity: u64,
    since: Instant,
    /// How many looks in a row saw the same.
    looks: u32,
}

/// One controller thread as the idle test saw it (for the jump log).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcessLook {
    pub pid: u64,
    /// The thread (the process's own id for its main thread).
    pub tid: u64,
    /// What its slot said: `waiting`, `busy`.
    pub slot: &'static str,
    /// Its wait's deadline, in virtual ns from the look (`None`: no timeout;
    /// negative: already due).
    pub deadline_in_ns: Option<i64>,
    /// Its scheduler state (`/proc/TID/stat`: `S` sleeping, `R` runnable ...).
    pub sched: char,
    /// Returns from waits so far.
    pub wakes: u64,
}

/// One jump of virtual time, as the jump log records it: from and to, what
/// sts itself was waiting for, and every controller process.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Jump {
    /// Jumps so far in this run, this one included.
    pub n: u64,
    /// Virtual ms since the clock page was made.
    pub from_ms: f64,
    pub to_ms: f64,
    /// Real ms since the clock page was made.
    pub real_ms: f64,
    /// How far ahead sts's own next deadline was (virtual ms).
    pub sts_deadline_in_ms: f64,
    /// sts's own activity counter (messages moved, events handled).
    pub sts_activity: u64,
    /// Real µs from the latest wait entered by a controller thread to sts
    /// knowing the run idle (this jump's decision), when a thread entered a
    /// wait since the last jump: the end of a reaction step. `None` for a
    /// jump that followed another with nothing done between.
    pub idle_known_after_us: Option<f64>,
    pub processes: Vec<ProcessLook>,
}

/// One pass of the idle test over the slots.
struct Look {
    /// Some thread works, is about to, or is runnable.
    busy: bool,
    /// The busy reason is one no wait entered will announce (a thread
    /// runnable or in a disk wait while its slot says waiting).
    unannounced: bool,
    /// An expected process has not attached.
    missing: bool,
    /// The earliest deadline, at most the target.
    earliest: u64,
    /// Every thread and its wake count.
    seen: Vec<(u64, u64)>,
    /// The latest real time a thread entered its wait.
    latest_entry_ns: u64,
}

/// Virtual time for one run: a clock page in shared memory (a memfd) that the
/// run's controller processes map through the shim.
pub struct VirtualTime {
    map: Arc<Mapping>,
    /// Hears every wait a controller thread enters (`None`: no thread could
    /// be started; the run loop then looks on its timer).
    listener: Option<Listener>,
    /// The kernel's network queues (`None`: not shown here; the idle test
    /// then keeps a quiet spell).
    kernel: Mutex<Option<KernelQueues>>,
    /// The last idle test failed for a reason no wait entered will announce.
    retry_soon: AtomicBool,
    /// Real monotonic ns of the last jump.
    last_jump_real_ns: AtomicU64,
    /// The run's controller processes: each one alive must be attached (and
    /// idle) before time may jump.
    expected: Mutex<Vec<u64>>,
    watch: Mutex<IdleWatch>,
    jumps: AtomicU64,
    /// Why time stopped jumping in this run, once it did (a timer the shim
    /// cannot move, a wait it cannot see).
    refused: Mutex<Option<String>>,
    /// Threads seen sleeping outside every known wait: since when, and their
    /// activity then.
    sleepers: Mutex<std::collections::HashMap<u64, (Instant, u64)>>,
    /// When the busy threads' kernel states were last read.
    busy_looked: Mutex<Instant>,
    /// The processes as the last look saw them (the jump log's material).
    last_look: Mutex<Vec<ProcessLook>>,
    /// The processes' /proc stat files, kept open between looks.
    stat: Mutex<StatFiles>,
    /// Attached processes found gone (dead, or a zombie) since the last
    /// [`VirtualTime::take_departed`]: time no longer waits for them.
    departed: Mutex<Vec<u64>>,
    /// Where jumps are logged, when asked (`[time] jump_log`).
    jump_log: Mutex<Option<std::io::BufWriter<std::fs::File>>>,
    /// Virtual and real monotonic ns when the page was made.
    created: (u64, u64),
}

impl std::fmt::Debug for VirtualTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualTime")
            .field("offset_ns", &self.page().offset_ns())
            .field("jumps", &self.jumps())
            .finish()
    }
}

impl VirtualTime {
    /// A fresh clock page with a zero offset.
    pub fn create() -> std::io::Result<Arc<VirtualTime>> {
        let map = Arc::new(Mapping::create()?);
        map.page().init();
        let vt = VirtualTime {
            listener: Listener::start(map.clone()),
            map,
            kernel: Mutex::new(KernelQueues::open()),
            retry_soon: AtomicBool::new(false),
            last_jump_real_ns: AtomicU64::new(0),
            expected: Mutex::new(Vec::new()),
            watch: Mutex::new(IdleWatch { seen: Vec::new(), activity: 0, since: Instant::now(), looks: 0 }),
            jumps: AtomicU64::new(0),
            refused: Mutex::new(None),
            sleepers: Mutex::new(std::collections::HashMap::new()),
            busy_looked: Mutex::new(Instant::now()),
            last_look: Mutex::new(Vec::new()),
            stat: Mutex::new(StatFiles::default()),
            departed: Mutex::new(Vec::new()),
            jump_log: Mutex::new(None),
            // A fresh page has a zero offset: virtual time is real time.
            created: (real_monotonic_ns(), real_monotonic_ns()),
        };
        Ok(Arc::new(vt))
    }

    fn page(&self) -> Page<'_> {
        self.map.page()
    }

    /// The page's descriptor (sent to forked controllers).
    pub fn fd(&self) -> RawFd {
        self.map.fd.as_raw_fd()
    }

    /// A path other processes can open the page by (`STS_CLOCK` for the shim).
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd())
    }

    /// Completes when a controller thread of the run has entered a wait
    /// since the last time it completed (the run may be idle now); never,
    /// where sts cannot listen (then [`VirtualTime::retry_after`] paces it).
    pub async fn announced(&self) {
        match &self.listener {
            Some(l) => l.announced().await,
            None => std::future::pending().await,
        }
    }

    /// How soon the run loop should run the idle test again if nothing
    /// arrives and no wait is announced before.
    pub fn retry_after(&self) -> Duration {
        let precise = self.listener.is_some() && self.kernel.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if !precise || self.retry_soon.load(Ordering::Relaxed) {
            RETRY_SOON
        } else {
            RETRY_LATER
        }
    }

    /// Virtual monotonic nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.page().shift(real_monotonic_ns())
    }

    /// How far virtual time is ahead of real time.
    pub fn offset(&self) -> Duration {
        Duration::from_nanos(self.page().offset_ns().max(0) as u64)
    }

    /// The run's wall-clock time now (what its controllers' `gettimeofday`
    /// says), in nanoseconds since the Unix epoch.
    pub fn wall_ns(&self) -> u64 {
        self.page().shift_wall(real_wall_ns())
    }

    /// Makes the run's wall clock read `ns` now (and go on from there): a
    /// replay serves the recorded run's dates to its controllers. Call it
    /// before any controller of the run reads the clock.
    pub fn serve_wall_clock(&self, ns: u64) {
        let page = self.page();
        page.set_wall_shift(ns as i64 - (real_wall_ns() as i64 + page.offset_ns()));
    }

    /// Sets virtual time back (or forward) to `ns` virtual monotonic
    /// nanoseconds: for rolling a run back to a checkpoint taken at `ns`,
    /// once every process that saw a later time is gone.
    pub fn rewind_to(&self, ns: u64) {
        self.page().set_offset(ns as i64 - real_monotonic_ns() as i64);
    }

    /// True once time stopped jumping for this run (see [`VirtualTime::refusal`]).
    pub fn stopped(&self) -> bool {
        self.refusal().is_some()
    }

    /// Why time stopped jumping for this run, if it did: a controller armed
    /// a timer the shim cannot move (a socket timeout, a timerfd ...), or a
    /// thread sleeps in a wait the shim cannot see. The session says so once.
    pub fn refusal(&self) -> Option<String> {
        let known = self.refused.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        if let Some((code, tid)) = self.page().refusal().filter(|_| !known) {
            self.refuse(format!(
                "thread {tid} of a controller armed {}, which runs on real time",
                sts_clockpage::refusal::describe(code)
            ));
        }
        self.refused.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn refuse(&self, why: String) {
        let mut r = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            self.note(&format!("time stops jumping: {why}"));
            *r = Some(why);
        }
    }

    /// How many threads of process `pid` have slots (more than one: the
    /// process cannot be forked whole, so it cannot be checkpointed).
    pub fn threads_of(&self, pid: u32) -> usize {
        self.page().slots().filter(|s| s.tid() != 0 && s.pid() == u64::from(pid)).count()
    }

    /// The attached processes found gone since the last call (each once).
    pub fn take_departed(&self) -> Vec<u64> {
        std::mem::take(&mut *self.departed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Writes every jump from now on into `path` (JSON Lines: one [`Jump`]
    /// a line, flushed as written), besides the debug-level log.
    pub fn log_jumps_to(&self, path: &std::path::Path) -> std::io::Result<()> {
        let file = std::fs::File::create(path)?;
        *self.jump_log.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::io::BufWriter::new(file));
        Ok(())
    }

    /// How many times time jumped.
    pub fn jumps(&self) -> u64 {
        self.jumps.load(Ordering::Relaxed)
    }

    /// Sets the run's controller processes: until each of them that is
    /// alive is attached and waiting, time never jumps. (One that died, on
    /// purpose or not, no longer holds time back.)
    pub fn expect(&self, pids: impl IntoIterator<Item = u32>) {
        *self.expected.lock().unwrap_or_else(|e| e.into_inner()) = pids.into_iter().map(u64::from).collect();
    }

    /// Stops waiting for process `pid`, which sts has just killed: a process
    /// sent SIGKILL never runs its code again, so the time it takes to be
    /// gone must not hold time back.
    pub fn forget(&self, pid: u32) {
        let pid = u64::from(pid);
        for slot in self.page().slots().filter(|s| s.pid() == pid) {
            slot.release(slot.tid());
        }
    }

    /// How many live processes are attached.
    pub fn attached(&self) -> usize {
        let mut stat = self.stat.lock().unwrap_or_else(|e| e.into_inner());
        let mut pids: Vec<u64> = self.page().slots().map(|s| s.pid()).filter(|&p| p != 0).collect();
        pids.sort_unstable();
        pids.dedup();
        pids.into_iter().filter(|&p| stat.is_alive(p)).count()
    }

    /// The attached threads: process, waiting or not, and how long until the
    /// deadline of its wait (`None`: no timeout), for diagnostics.
    pub fn processes(&self) -> Vec<(u64, bool, Option<Duration>)> {
        let now = self.now_ns();
        self.page()
            .slots()
            .filter(|s| s.tid() != 0)
            .map(|s| {
                (
                    s.pid(),
                    s.state() == WAITING,
                    (s.deadline_ns() != NO_DEADLINE).then(|| Duration::from_nanos(s.deadline_ns().saturating_sub(now))),
                )
            })
            .collect()
    }

    /// True when the whole run is quiescent (what [`Clock::jump_if_idle`]
    /// requires, without jumping): every controller process waits with its
    /// deadline ahead, none is runnable, and nothing is in flight.
    pub fn is_idle(&self, activity: u64, sts_quiet: &dyn Fn() -> bool) -> bool {
        self.idle_until(u64::MAX, activity, sts_quiet).is_some()
    }

    /// The idle test (`docs/virtual-time.md`): `Some(earliest deadline, at
    /// most target_ns)` when idle, with the real time the latest wait was
    /// entered. Two looks at every thread with the kernel's queues and sts's
    /// own (`sts_quiet`) read between them: each thread waited, asleep, at
    /// both looks and did not wake between (its wake count is the same), so
    /// there is an instant between the looks at which all waited at once,
    /// and nothing was in flight towards any of them after it.
    fn idle_until(&self, target_ns: u64, activity: u64, sts_quiet: &dyn Fn() -> bool) -> Option<(u64, u64)> {
        if self.refusal().is_some() {
            return None;
        }
        let first = self.look(target_ns);
        let mut kernel = self.kernel.lock().unwrap_or_else(|e| e.into_inner());
        let Some(queues) = kernel.as_mut() else {
            drop(kernel);
            return self.after_a_quiet_spell(first, activity, sts_quiet);
        };
        if first.busy || first.missing {
            self.retry_soon.store(first.unannounced, Ordering::Relaxed);
            return None;
        }
        if !queues.quiet() || !sts_quiet() {
            self.retry_soon.store(true, Ordering::Relaxed);
            return None;
        }
        drop(kernel);
        let second = self.look(target_ns);
        if second.busy || second.missing || second.seen != first.seen {
            self.retry_soon.store(second.unannounced, Ordering::Relaxed);
            return None;
        }
        self.retry_soon.store(false, Ordering::Relaxed);
        Some((second.earliest, second.latest_entry_ns))
    }

    /// The idle test where the kernel's queues cannot be read: the same look
    /// must repeat [`IDLE_LOOKS`] times over at least [`IDLE_QUIET`], each
    /// after the run loop yielded.
    fn after_a_quiet_spell(&self, look: Look, activity: u64, sts_quiet: &dyn Fn() -> bool) -> Option<(u64, u64)> {
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if look.busy || look.missing || !sts_quiet() || look.seen != watch.seen || activity != watch.activity {
            *watch = IdleWatch { seen: look.seen, activity, since: Instant::now(), looks: 1 };
            return None;
        }
        watch.looks += 1;
        if watch.since.elapsed() < IDLE_QUIET || watch.looks < IDLE_LOOKS {
            return None;
        }
        Some((look.earliest, look.latest_entry_ns))
    }

    /// One look at every thread of the run (see [`Look`]); records it for
    /// the jump log, frees the slots of threads gone and follows threads
    /// asleep outside every wait the shim knows.
    fn look(&self, target_ns: u64) -> Look {
        let page = self.page();
        let now = self.now_ns();
        let mut earliest = target_ns;
        let mut seen = Vec::new();
        let mut looks = Vec::new();
        let mut busy = false;
        let mut unannounced = false;
        let mut latest_entry_ns = 0;
        let mut stat = self.stat.lock().unwrap_or_else(|e| e.into_inner());
        let mut sleepers = self.sleepers.lock().unwrap_or_else(|e| e.into_inner());
        // The slots alone may already say "busy": then only the busy threads'
        // kernel states matter (are they gone, or asleep where the shim cannot
        // see?), and those only now and then. A threaded controller has a
        // dozen threads: reading every one's state every 0.2 ms while one of
        // them works would cost sts more than the controller.
        let slot_busy = |s: &sts_clockpage::Slot| s.state() != WAITING || s.deadline_ns() <= now;
        let some_slot_busy = page.slots().any(|s| s.tid() != 0 && (s.pid() == 0 || slot_busy(&s)));
        let look_at_busy = {
            let mut last = self.busy_looked.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.elapsed() >= BUSY_LOOKS_EVERY;
            if due && some_slot_busy {
                *last = Instant::now();
            }
            due
        };
        for slot in page.slots() {
            let tid = slot.tid();
            if tid == 0 {
                continue;
            }
            let pid = slot.pid();
            if pid == 0 {
                busy = true; // a slot being claimed: a thread about to exist
                continue;
            }
            let read_state = !some_slot_busy || (look_at_busy && slot_busy(&slot));
            let state = if read_state { stat.state(tid) } else { Some('?') };
            if state.is_none_or(|s| s == 'Z' || s == 'X') {
                slot.release(tid);
                sleepers.remove(&tid);
                if tid == pid {
                    self.departed.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
                    self.note(&format!("process {pid} is gone; time no longer waits for it"));
                }
                continue;
            }
            let deadline = slot.deadline_ns();
            let wakes = slot.activity();
            let waiting = slot.state() == WAITING;
            // A thread past its deadline is about to wake, and a runnable one
            // (woken by input the scheduler has not let it see yet) or one in
            // an uninterruptible sleep (a page fault, a disk read) is busy.
            // A thread busy in its slot ends in a wait entered, which is
            // announced. One runnable or in a disk wait while its slot says
            // waiting may not (between two of the shim's chunks of one wait,
            // or a page fault), so the loop looks again soon; looking at
            // once after such a thread was seen also measured faster than
            // waiting for its announcement (`docs/virtual-time.md`).
            let runnable = matches!(state, Some('R' | 'D'));
            busy |= !waiting || deadline <= now || runnable;
            unannounced |= waiting && runnable;
            latest_entry_ns = latest_entry_ns.max(slot.entered_ns());
            if !waiting && state == Some('S') {
                self.watch_sleeper(&mut sleepers, pid, tid, wakes);
            } else if read_state {
                sleepers.remove(&tid);
            }
            if deadline != NO_DEADLINE {
                earliest = earliest.min(deadline);
            }
            seen.push((tid, wakes));
            looks.push(ProcessLook {
                pid,
                tid,
                slot: if waiting { "waiting" } else { "busy" },
                deadline_in_ns: (deadline != NO_DEADLINE).then(|| deadline as i64 - now as i64),
                sched: state.unwrap_or('?'),
                wakes,
            });
        }
        drop(sleepers);
        // A thread that was busy in the first pass and waits again in the
        // second left the others' states unread: not a look that may count.
        busy |= some_slot_busy;
        let missing = self
            .expected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|&pid| !looks.iter().any(|l| l.pid == pid) && stat.is_alive(pid));
        *self.last_look.lock().unwrap_or_else(|e| e.into_inner()) = looks;
        Look { busy, unannounced, missing, earliest, seen, latest_entry_ns }
    }

    /// Follows a thread whose slot says busy while the kernel says it
    /// sleeps: past [`INVISIBLE_AFTER`] without activity, it sleeps in a wait
    /// the shim cannot see, and time stops jumping, with its system call named.
    fn watch_sleeper(
        &self,
        sleepers: &mut std::collections::HashMap<u64, (Instant, u64)>,
        pid: u64,
        tid: u64,
        wakes: u64,
    ) {
        let since = sleepers.entry(tid).or_insert((Instant::now(), wakes));
        if since.1 != wakes {
            *since = (Instant::now(), wakes);
        } else if since.0.elapsed() >= INVISIBLE_AFTER {
            let call = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap_or_default();
            let number = call.split_whitespace().next().and_then(|n| n.parse::<i64>().ok());
            let what = match number {
                Some(n) => format!("system call {n}{}", syscall_name(n).map(|s| format!(" ({s})")).unwrap_or_default()),
                None => "a wait the kernel does not name".into(),
            };
            self.refuse(format!(
                "thread {tid} of controller process {pid} has slept for {}s in {what}, which the shim does not see (a raw system call, or a library it does not cover), so time cannot know when it would wake",
                INVISIBLE_AFTER.as_secs()
            ));
        }
    }

    /// See [`Clock::jump_if_idle`]; `target_ns` is virtual monotonic.
    fn jump_if_idle(&self, target_ns: u64, activity: u64, sts_quiet: &dyn Fn() -> bool) -> bool {
        let Some((earliest, latest_entry_ns)) = self.idle_until(target_ns, activity, sts_quiet) else { return false };
        let decided_ns = real_monotonic_ns();
        let now = self.now_ns();
        if earliest <= now {
            return false;
        }
        self.page().advance(earliest - now);
        let n = self.jumps.fetch_add(1, Ordering::Relaxed) + 1;
        let last_jump = self.last_jump_real_ns.swap(decided_ns, Ordering::Relaxed);
        let reaction = latest_entry_ns > last_jump && latest_entry_ns <= decided_ns;
        let known_after = reaction.then(|| (decided_ns - latest_entry_ns) as f64 / 1e3);
        self.log_jump(n, now, earliest, target_ns, activity, known_after);
        // No new quiet spell is needed for the next jump: a process whose
        // deadline this jump reached blocks it until it has woken (and its
        // activity changed), and whatever sts does next counts as activity.
        true
    }
}

impl VirtualTime {
    /// Records something that bears on time (not a jump: a process gone, a
    /// connection closed) in the jump log, and at debug level.
    pub fn note(&self, what: &str) {
        tracing::debug!("{what}");
        let mut log = self.jump_log.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = log.as_mut() {
            let line = serde_json::json!({
                "event": what,
                "at_ms": self.now_ns().saturating_sub(self.created.0) as f64 / 1e6,
                "real_ms": real_monotonic_ns().saturating_sub(self.created.1) as f64 / 1e6,
            });
            let _ = writeln!(w, "{line}").and_then(|()| w.flush());
        }
    }

    /// Records jump `n` from `from_ns` to `to_ns` (virtual): at debug level,
    /// and in the jump log when there is one.
    fn log_jump(&self, n: u64, from_ns: u64, to_ns: u64, target_ns: u64, activity: u64, known_after: Option<f64>) {
        let mut log = self.jump_log.lock().unwrap_or_else(|e| e.into_inner());
        if log.is_none() && !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let ms = |ns: u64, since: u64| ns.saturating_sub(since) as f64 / 1e6;
        let jump = Jump {
            n,
            from_ms: ms(from_ns, self.created.0),
            to_ms: ms(to_ns, self.created.0),
            real_ms: ms(real_monotonic_ns(), self.created.1),
            sts_deadline_in_ms: ms(target_ns, from_ns),
            sts_activity: activity,
            idle_known_after_us: known_after,
            processes: self.last_look.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        };
        tracing::debug!("jump {n}: {:.1} -> {:.1} ms; processes {:?}", jump.from_ms, jump.to_ms, jump.processes);
        if let Some(w) = log.as_mut() {
            let written = serde_json::to_writer(&mut *w, &jump).map_err(std::io::Error::other).and_then(|()| {
                w.write_all(b"\n")?;
                w.flush()
            });
            if let Err(e) = written {
                tracing::warn!("the jump log stops: {e}");
                *log = None;
            }
        }
    }
}

/// The name of system call `n` for the waits a thread may be found in (x86-64
/// numbers; elsewhere only the number is given).
fn syscall_name(n: i64) -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    Some(match n {
        0 => "read",
        1 => "write",
        7 => "poll",
        23 => "select",
        34 => "pause",
        35 => "nanosleep",
        42 => "connect",
        43 => "accept",
        45 => "recvfrom",
        47 => "recvmsg",
        61 => "wait4",
        128 => "rt_sigtimedwait",
        130 => "rt_sigsuspend",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        _ => return None,
    })
}

/// Open `/proc/PID/stat` files, read again from the start on every look
/// (one `pread` instead of an open, a read and a close: the idle test looks
/// thousands of times a second). A file whose process is gone fails to read
/// (`ESRCH`) and is dropped, so a pid used again gets a fresh one.
#[derive(Default)]
struct StatFiles(std::collections::HashMap<u64, std::fs::File>);

impl StatFiles {
    /// The scheduler state of process `pid` (`R` running or runnable, `S`
    /// sleeping, `Z` zombie ...), `None` if it is gone.
    fn state(&mut self, pid: u64) -> Option<char> {
        use std::os::unix::fs::FileExt;
        let file = match self.0.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(std::fs::File::open(format!("/proc/{pid}/stat")).ok()?)
            }
        };
        // "PID (COMM) S ...": COMM is at most 16 bytes, so the state is in
        // the first 64; it follows the last ')' (COMM may hold one).
        let mut buf = [0u8; 64];
        let Ok(n) = file.read_at(&mut buf, 0) else {
            self.0.remove(&pid);
            return None;
        };
        let line = &buf[..n];
        let close = line.iter().rposition(|&b| b == b')')?;
        line[close + 1..].iter().find(|b| !b.is_ascii_whitespace()).map(|&b| b as char)
    }

    /// True if process `pid` exists and is not a zombie.
    fn is_alive(&mut self, pid: u64) -> bool {
        self.state(pid).is_some_and(|s| s != 'Z' && s != 'X')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_wall_clock_reads_the_recorded_date_and_moves_with_virtual_time() {
        let vt = VirtualTime::create().unwrap();
        let recorded = 978_307_200_000_000_000; // 2001-01-01
        vt.serve_wall_clock(recorded);
        let now = vt.wall_ns();
        assert!(now >= recorded && now < recorded + 1_000_000_000, "{now}");
        vt.page().advance(5_000_000_000);
        let later = vt.wall_ns();
        assert!(later >= now + 5_000_000_000 && later < now + 6_000_000_000, "{later}");
    }

    #[test]
    fn a_real_clock_counts_from_zero() {
        let c = Clock::start();
        assert!(c.now() < 1000);
        assert!(!c.jump_if_idle(1_000_000, 0), "a real clock never jumps");
    }

    /// Looks at the run as sts's loop would, for a quiet spell's worth of
    /// looks; true if time jumped.
    fn look_for_a_while(clock: &Clock, target: Millis, activity: u64) -> bool {
        (0..=IDLE_LOOKS).any(|_| {
            std::thread::sleep(IDLE_QUIET);
            clock.jump_if_idle(target, activity)
        })
    }

    #[test]
    fn without_the_kernels_queues_time_jumps_only_after_a_quiet_spell_and_never_backwards() {
        let vt = VirtualTime::create().unwrap();
        *vt.kernel.lock().unwrap() = None;
        let clock = Clock::start_virtual(vt.clone());
        assert_eq!(vt.retry_after(), RETRY_SOON, "without the kernel's queues sts looks on its timer");
        // Nothing to wait for: sts alone, idle, jumps to its own target.
        assert!(!clock.jump_if_idle(60_000, 0), "the first look only starts the quiet spell");
        std::thread::sleep(IDLE_QUIET * 2);
        assert!(!clock.jump_if_idle(60_000, 0), "long enough, but only two looks");
        assert!(!clock.jump_if_idle(60_000, 1), "sts did something: the spell starts again");
        assert!(!clock.jump_if_idle(60_000, 1) && !clock.jump_if_idle(60_000, 1), "three looks, but not long enough");
        std::thread::sleep(IDLE_QUIET * 2);
        assert!(!clock.jump_if_idle_with(60_000, 1, &|| false), "sts has something in flight");
        assert!(!clock.jump_if_idle(60_000, 1) && !clock.jump_if_idle(60_000, 1), "the spell started again");
        std::thread::sleep(IDLE_QUIET * 2);
        assert!(clock.jump_if_idle(60_000, 1));
        assert!(clock.now() >= 60_000 && clock.now() < 61_000, "now {}", clock.now());
        assert!(!look_for_a_while(&clock, 10_000, 1), "a target in the past never moves time back");
        assert!(clock.now() >= 60_000);
        assert_eq!(vt.jumps(), 1);
    }

    /// Tries the idle test a few times (the kernel's queues may hold other
    /// programs' packets for a moment); true if time jumped.
    fn jumps_within_a_few_tries(clock: &Clock, target: Millis, sts_quiet: &dyn Fn() -> bool) -> bool {
        (0..200).any(|_| {
            let jumped = clock.jump_if_idle_with(target, 0, sts_quiet);
            if !jumped {
                std::thread::sleep(Duration::from_micros(100));
            }
            jumped
        })
    }

    #[test]
    fn with_the_kernels_queues_time_jumps_at_once_unless_sts_has_something_in_flight() {
        let vt = VirtualTime::create().unwrap();
        assert!(vt.kernel.lock().unwrap().is_some(), "this machine's kernel shows its network queues");
        let clock = Clock::start_virtual(vt.clone());
        assert!(!clock.jump_if_idle_with(60_000, 0, &|| false), "sts has something in flight");
        assert_eq!(vt.retry_after(), RETRY_SOON, "which needs no wait entered to end: look again soon");
        assert_eq!(vt.jumps(), 0);
        let asked = std::cell::Cell::new(0);
        let quiet = || {
            asked.set(asked.get() + 1);
            true
        };
        assert!(jumps_within_a_few_tries(&clock, 60_000, &quiet), "no quiet spell: the first quiet test jumps");
        assert!(asked.get() >= 1, "sts's own side was asked");
        assert!(clock.now() >= 60_000 && clock.now() < 61_000, "now {}", clock.now());
        assert_eq!(vt.retry_after(), RETRY_LATER);
        assert!(!jumps_within_a_few_tries(&clock, 10_000, &|| true), "a target in the past never moves time back");
        assert_eq!(vt.jumps(), 1);
    }

    #[test]
    fn kept_stat_files_follow_a_process_to_its_end() {
        let mut stat = StatFiles::default();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        // Killed when dropped, so a failing assertion leaves no busy loop.
        struct Reaped(std::process::Child);
        impl Drop for Reaped {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let spinner = Reaped(std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap());
        let spinner = &spinner.0;
        // Seen runnable at least once (a busy machine may also show it
        // waiting on a page for a moment: 'D').
        let mut seen = None;
        while seen != Some('R') && std::time::Instant::now() < until {
            seen = stat.state(spinner.id() as u64);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(seen, Some('R'), "a spinning child runs or is runnable");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as u64;
        let mut seen = None;
        while seen != Some('S') && std::time::Instant::now() < until {
            seen = stat.state(pid);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(seen, Some('S'), "a sleeping child, read again through one open file");
        child.kill().unwrap();
        while stat.state(pid) != Some('Z') && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!stat.is_alive(pid), "killed, not yet reaped: a zombie");
        child.wait().unwrap();
        assert_eq!(stat.state(pid), None, "reaped: gone");
        assert!(!stat.0.contains_key(&pid), "its file is let go");
    }

    #[test]
    fn time_waits_for_the_expected_processes_and_their_earliest_timer() {
        let vt = VirtualTime::create().unwrap();
        let clock = Clock::start_virtual(vt.clone());
        // A "controller" (a sleeping child: the test itself is running, so
        // never idle), expected but not attached yet.
        let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        vt.expect([child.id()]);
        assert!(!look_for_a_while(&clock, 60_000, 0), "no process attached yet");
        // It attaches and waits with a timer in 5 s.
        let (_, slot) = vt.page().claim(child.id() as u64, child.id() as u64, |_| false).unwrap();
        assert!(!look_for_a_while(&clock, 60_000, 0), "busy");
        slot.wait_until(vt.now_ns() + 5_000 * NS_PER_MS);
        assert!(look_for_a_while(&clock, 60_000, 0));
        let now = clock.now();
        assert!((5_000..5_100).contains(&now), "jumped to the timer, not to sts's target: {now}");
        // Its deadline has come: not idle until it wakes and waits again.
        assert!(!look_for_a_while(&clock, 60_000, 0));
        slot.woke();
        slot.wait_until(NO_DEADLINE);
        assert!(look_for_a_while(&clock, 60_000, 0));
        assert!(clock.now() >= 60_000);
        // A runnable process is not idle, whatever its slot says.
        let mut spinner = std::process::Command::new("sh").args(["-c", "while :; do :; done"]).spawn().unwrap();
        let (_, spin) = vt.page().claim(spinner.id() as u64, spinner.id() as u64, |_| false).unwrap();
        spin.wait_until(NO_DEADLINE);
        vt.expect([child.id(), spinner.id()]);
        assert!(!look_for_a_while(&clock, 120_000, 0), "a running process blocks the jump");
        spinner.kill().unwrap();
        spinner.wait().unwrap();
        // An expected process that died (and never attached) holds nothing back.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        vt.expect([child.id(), spinner.id(), gone.id()]);
        assert!(look_for_a_while(&clock, 120_000, 0), "dead processes do not hold time back");
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
