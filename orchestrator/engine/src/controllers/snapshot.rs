//! Pristine controller snapshots: a controller started
//! once with the `sts-shim` library preloaded parks itself, ready and
//! quiescent, as a *zygote*; every run then gets a fresh copy forked from it
//! in milliseconds instead of starting the process again (os-ken takes
//! seconds to import).
//!
//! The shim's side of the protocol is in `shim/src/lib.rs`. Here:
//! [`Zygote::start`] starts the controller with `LD_PRELOAD` and
//! `STS_SHIM_SOCKET`, waits for `ready PID` (or `refuse ...`, for a
//! multi-threaded process); [`Zygote::fork`] sends `fork` with the child's
//! stdout, stderr and a report pipe, and adopts the child as a
//! [`Controller`] on the port the child reports (each child listens on a port
//! of its own, so copies can run side by side).
//!
//! Zygotes live in their [`crate::Engine`]'s [`ZygotePool`], one per
//! controller command ([`fork_or_start`]), until the engine is dropped; each
//! also dies with sts (PDEATHSIG, like every controller), and each child dies
//! with its zygote.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IoSlice, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};

use crate::controller::{Controller, ControllerSpec};

/// Why a snapshot could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The shim library is not where sts looks for it.
    #[error("the snapshot shim libsts_shim.so is missing (looked in {0} and around it); build it with `cargo build --release -p sts-shim` (scripts/setup does), or set STS_SHIM")]
    NoShim(PathBuf),
    /// The shim library was built from other sources than this sts.
    #[error("{} was built from other sources than this sts (shim build {found}, sts build {}); rebuild both with `cargo build --release -p sts -p sts-shim`, or point STS_SHIM at the library built with this sts", path.display(), sts_clockpage::SHIM_BUILD)]
    OtherBuild { path: PathBuf, found: String },
    /// The controller could not be started or forked.
    #[error("{0}")]
    Start(String),
    /// Not now: the controller has bytes to read (a checkpoint; try again
    /// once it has read them).
    #[error("{0}")]
    Busy(String),
    /// The shim refused to snapshot this controller (e.g. several threads).
    #[error("the controller cannot be snapshotted: {0}")]
    Refused(String),
    /// This controller cannot be checkpointed mid-run (several threads, or
    /// not forked from a snapshot on virtual time).
    #[error("the controller cannot be checkpointed: {0}")]
    NoCheckpoint(String),
}

/// Where the shim library is: `$STS_SHIM`, or `libsts_shim.so` next to the
/// running program (`cargo build`), in `deps/` beside it (`cargo test` leaves
/// it there), or one directory up (for test binaries, which live in `deps/`).
pub fn shim_path() -> Result<PathBuf, SnapshotError> {
    if let Some(p) = std::env::var_os("STS_SHIM") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| SnapshotError::Start(format!("cannot find sts itself: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join("libsts_shim.so"),
        dir.join("deps/libsts_shim.so"),
        dir.parent().unwrap_or(dir).join("libsts_shim.so"),
    ];
    candidates.iter().find(|p| p.exists()).cloned().ok_or_else(|| SnapshotError::NoShim(dir.to_owned()))
}

/// A fresh path for a zygote's control socket. In the temporary directory,
/// not next to the logs: a Unix socket path must fit in 108 bytes, and
/// experiment directories can be deep.
fn control_socket_path() -> PathBuf {
    // Random, not counted: jobs in one process share no counter.
    let n: u64 = rand::random();
    std::env::temp_dir().join(format!("sts-shim-{}-{n:016x}.sock", std::process::id()))
}

/// `spec` with the shim preloaded (before any library the environment
/// already preloads).
pub fn with_shim(spec: &ControllerSpec) -> Result<ControllerSpec, SnapshotError> {
    let shim = shim_path()?;
    let mut spec = spec.clone();
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.is_empty() => format!("{}:{existing}", shim.display()),
        _ => shim.display().to_string(),
    };
    spec.env.push(("LD_PRELOAD".into(), preload));
    Ok(spec)
}

/// `spec` started with the shim on the virtual time of `clock` (a new
/// process, not a snapshot).
pub fn on_virtual_time(
    spec: &ControllerSpec,
    clock: &crate::clock::VirtualTime,
) -> Result<ControllerSpec, SnapshotError> {
    let mut spec = with_shim(spec)?;
    spec.env.push(("STS_CLOCK".into(), clock.path()));
    Ok(spec)
}

/// Checks a zygote's greeting (`ready PID build=FINGERPRINT`) against the
/// shim sources this sts was built with; the error says the shim's build.
fn same_build(greeting: &str) -> Result<(), String> {
    match greeting.split_whitespace().find_map(|w| w.strip_prefix("build=")) {
        Some(b) if b == sts_clockpage::SHIM_BUILD => Ok(()),
        Some(b) => Err(b.to_string()),
        None => Err("unknown, older than build checks".to_string()),
    }
}

/// A controller parked by the shim, ready to be forked.
pub struct Zygote {
    /// The parked process itself (killed, with its children, on drop).
    process: Controller,
    control: BufReader<UnixStream>,
    name: String,
    forks: u64,
    /// What the shim said when it parked (`ready PID build=B threads=N parker=TID`).
    greeting: String,
}

impl Zygote {
    /// Starts `spec` with the shim and waits until it has parked. A port
    /// chosen free can be taken before the controller binds it (its side
    /// service's too, which it may bind after its OpenFlow port): a
    /// controller that exits saying so is started again on other ports, up
    /// to three times in all.
    pub fn start(spec: &ControllerSpec, log_path: &Path) -> Result<Zygote, SnapshotError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match Zygote::start_once(spec, log_path) {
                Err(SnapshotError::Start(e)) if attempt < 3 && e.contains("Address already in use") => continue,
                other => return other,
            }
        }
    }

    fn start_once(spec: &ControllerSpec, log_path: &Path) -> Result<Zygote, SnapshotError> {
        let socket = control_socket_path();
        let _ = std::fs::remove_file(&socket);
        let listener =
            UnixListener::bind(&socket).map_err(|e| SnapshotError::Start(format!("{}: {e}", socket.display())))?;
        let mut spec = with_shim(spec)?;
        spec.env.push(("STS_SHIM_SOCKET".into(), socket.display().to_string()));
        // A threaded controller is parked once it listens on its OpenFlow port.
        spec.env.push(("STS_SHIM_AWAIT".into(), "{port}".into()));
        let mut process =
            Controller::spawn_on_free_port(&spec, log_path).map_err(|e| SnapshotError::Start(e.to_string()))?;
        // The shim connects at the controller's first wait after it listens
        // (a threaded one's: once it listens on its port and every thread
        // sleeps), or says why it cannot park it.
        listener.set_nonblocking(true).map_err(|e| SnapshotError::Start(e.to_string()))?;
        let deadline = Instant::now() + spec.start_timeout;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(SnapshotError::Start(e.to_string())),
            }
            if !process.is_alive() {
                // Let its output reach the log before quoting it.
                std::thread::sleep(Duration::from_millis(100));
                return Err(SnapshotError::Start(format!(
                    "{} exited before parking; last log lines:\n{}",
                    spec.name,
                    process.log_tail(10)
                )));
            }
            if Instant::now() >= deadline {
                return Err(SnapshotError::Start(format!(
                    "{} never reached a point the shim could park it at within {:?} (a wait after listening; is it preloadable?); last log lines:\n{}",
                    spec.name,
                    spec.start_timeout,
                    process.log_tail(10)
                )));
            }
            // Woken as the shim connects; looking again now and then whether
            // the controller is still alive.
            let mut fds = [nix::poll::PollFd::new(listener.as_fd(), nix::poll::PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u8));
        };
        let _ = std::fs::remove_file(&socket);
        stream.set_nonblocking(false).map_err(|e| SnapshotError::Start(e.to_string()))?;
        stream.set_read_timeout(Some(spec.start_timeout)).map_err(|e| SnapshotError::Start(e.to_string()))?;
        let mut control = BufReader::new(stream);
        let mut line = String::new();
        control.read_line(&mut line).map_err(|e| SnapshotError::Start(format!("reading the shim's greeting: {e}")))?;
        match line.split_whitespace().next() {
            Some("ready") => {
                if let Err(found) = same_build(&line) {
                    return Err(SnapshotError::OtherBuild { path: shim_path()?, found });
                }
                Ok(Zygote { process, control, name: spec.name.clone(), forks: 0, greeting: line.trim().to_string() })
            }
            Some("refuse") => Err(SnapshotError::Refused(line.trim()["refuse".len()..].trim().to_string())),
            _ => Err(SnapshotError::Start(format!("unexpected greeting from the shim: {:?}", line.trim()))),
        }
    }

    /// The zygote's own address (children listen elsewhere).
    pub fn addr(&self) -> SocketAddr {
        self.process.addr()
    }

    /// The parked process's id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// What the shim said when it parked the process: its pid, build, how
    /// many threads it has, and which one parked them (`parker=TID`).
    pub fn greeting(&self) -> &str {
        &self.greeting
    }

    /// Forks a fresh copy whose output goes to `log_path`, on the virtual
    /// time of `clock` if given (the copy maps that clock page).
    pub fn fork(
        &mut self,
        log_path: &Path,
        clock: Option<&crate::clock::VirtualTime>,
    ) -> Result<Controller, SnapshotError> {
        let err =
            |what: &str, e: &dyn std::fmt::Display| SnapshotError::Start(format!("forking {}: {what}: {e}", self.name));
        let output = CopyOutput::new().map_err(|e| err("pipe", &e))?;
        let mut fds = output.theirs().to_vec();
        // Every TCP listener moves, a REST API's too: copies running side by
        // side must not accept each other's requests.
        let mut command = "fork".to_string();
        // A copy on virtual time also gets a control socket, for checkpoints.
        let mut shim = None;
        if let Some(c) = clock {
            let (ours, theirs) = UnixStream::pair().map_err(|e| err("socketpair", &e))?;
            fds.push(c.fd());
            fds.push(theirs.as_raw_fd());
            command.push_str(" clock control");
            shim = Some((ours, theirs));
        }
        // A zygote parked before it listened on this port: its copy reports
        // once it does.
        command.push_str(&format!(" await={}\n", self.process.addr().port()));
        let iov = [IoSlice::new(command.as_bytes())];
        let cmsg = [ControlMessage::ScmRights(&fds)];
        sendmsg::<()>(self.control.get_ref().as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
            .map_err(|e| err("sending the command", &e))?;
        let shim = shim.map(|(ours, _theirs)| ours);
        let mut line = String::new();
        self.control.read_line(&mut line).map_err(|e| err("reading the reply", &e))?;
        let pid: u32 = match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["forked", pid] => pid.parse().map_err(|e| err("the reply", &e))?,
            _ => return Err(err("the shim said", &line.trim())),
        };
        self.forks += 1;
        output
            .adopt(&self.name, pid, self.process.addr(), self.process.aux_port(), log_path, shim)
            .map_err(|e| err("the child", &e))
    }

    /// How many copies this zygote has forked.
    pub fn forks(&self) -> u64 {
        self.forks
    }
}

/// The pipes a new copy (forked from a zygote or resumed from a checkpoint)
/// gets for its stdout, its stderr and its report, and what sts does with
/// them once the copy exists.
pub(crate) struct CopyOutput {
    out: (OwnedFd, OwnedFd),
    err: (OwnedFd, OwnedFd),
    report: (OwnedFd, OwnedFd),
}

impl CopyOutput {
    pub(crate) fn new() -> nix::Result<CopyOutput> {
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        Ok(CopyOutput { out: pipe()?, err: pipe()?, report: pipe()? })
    }

    /// The copy's ends, to send with the command: stdout, stderr, report.
    pub(crate) fn theirs(&self) -> [std::os::fd::RawFd; 3] {
        [self.out.1.as_raw_fd(), self.err.1.as_raw_fd(), self.report.1.as_raw_fd()]
    }

    /// Once copy `pid` exists: reads its report, finds the port it now
    /// listens on instead of `listen`'s, and adopts it as a [`Controller`]
    /// logging to `log_path`.
    pub(crate) fn adopt(
        self,
        name: &str,
        pid: u32,
        listen: SocketAddr,
        aux_port: u16,
        log_path: &Path,
        shim: Option<UnixStream>,
    ) -> Result<Controller, String> {
        let CopyOutput { out, err, report } = self;
        drop((out.1, err.1, report.1));
        let ports = read_report(report.0, Duration::from_secs(10)).map_err(|e| format!("its report: {e}"))?;
        tracing::debug!("{name}: copy {pid} moved its listeners (old, new): {ports:?}; OpenFlow was {listen}");
        let moved: Vec<u16> = ports.iter().filter(|(old, _)| *old == listen.port()).map(|&(_, new)| new).collect();
        let port = match moved.as_slice() {
            [port] => *port,
            [] => return Err(format!("its report: no new port for {} in {ports:?}", listen.port())),
            // Two listeners shared the OpenFlow port (SO_REUSEPORT): sts
            // cannot tell which one is OpenFlow.
            _ => {
                return Err(format!(
                    "its report: {} listeners were on the OpenFlow port {}: {ports:?}",
                    moved.len(),
                    listen.port()
                ))
            }
        };
        let addr = SocketAddr::new(listen.ip(), port);
        // A side service (`{aux_port}`) listening before the snapshot moved too.
        let aux_port = ports.iter().find(|(old, _)| *old == aux_port).map_or(aux_port, |&(_, new)| new);
        Controller::adopt_forked(name, pid, addr, aux_port, log_path, File::from(out.0), File::from(err.0), shim)
            .map_err(|e| format!("adopting it (log {}): {e}", log_path.display()))
    }
}

/// Reads `port OLD NEW` lines until `ok`.
fn read_report(from: OwnedFd, within: Duration) -> Result<Vec<(u16, u16)>, String> {
    let deadline = Instant::now() + within;
    let mut text = String::new();
    let mut file = File::from(from);
    loop {
        let mut fds = [nix::poll::PollFd::new(std::os::fd::AsFd::as_fd(&file), nix::poll::PollFlags::POLLIN)];
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no report within {within:?} (so far: {text:?})"));
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)).map_err(|e| e.to_string())?;
        let mut buf = [0u8; 512];
        let n = std::io::Read::read(&mut file, &mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("the child ended its report early: {text:?}"));
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if text.lines().any(|l| l == "ok") {
            break;
        }
    }
    let mut ports = Vec::new();
    for l in text.lines() {
        match l.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["port", old, new] => ports.push((
                old.parse().map_err(|_| format!("bad line {l:?}"))?,
                new.parse().map_err(|_| format!("bad line {l:?}"))?,
            )),
            ["ok"] => {}
            _ if l.starts_with("error") => return Err(l.to_string()),
            _ => {}
        }
    }
    Ok(ports)
}

/// An engine's zygotes, by controller command. Dropping the pool kills them
/// (and so their copies).
#[derive(Default)]
pub struct ZygotePool {
    zygotes: HashMap<String, Zygote>,
}

impl ZygotePool {
    /// How many zygotes are parked.
    pub fn len(&self) -> usize {
        self.zygotes.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.zygotes.is_empty()
    }
}

fn key(spec: &ControllerSpec) -> String {
    format!("{:?} {:?}", spec.command, spec.env)
}

/// A fresh copy of `spec` with its output in `log_path` (on `clock`'s virtual
/// time, if given): forked from `engine`'s zygote for the same command,
/// started (once) if there is none.
pub fn fork_or_start(
    engine: &crate::Engine,
    spec: &ControllerSpec,
    log_path: &Path,
    clock: Option<&crate::clock::VirtualTime>,
) -> Result<Controller, SnapshotError> {
    let zlog = log_path.with_file_name(format!(
        "{}-zygote.log",
        log_path.file_stem().and_then(|s| s.to_str()).unwrap_or("controller")
    ));
    let mut pool = engine.zygotes();
    parked(&mut pool, spec, &zlog)?.fork(log_path, clock)
}

/// The pool's zygote for `spec`, started (output in `log_path`) if there is none.
fn parked<'p>(
    pool: &'p mut ZygotePool,
    spec: &ControllerSpec,
    log_path: &Path,
) -> Result<&'p mut Zygote, SnapshotError> {
    let k = key(spec);
    if !pool.zygotes.contains_key(&k) {
        let z = Zygote::start(spec, log_path)?;
        tracing::info!("{}: zygote parked (pid {}, log {})", spec.name, z.process.pid(), log_path.display());
        pool.zygotes.insert(k.clone(), z);
    }
    Ok(pool.zygotes.get_mut(&k).expect("just inserted"))
}

/// Starts (once) `engine`'s zygote for `spec` without forking a copy, its
/// output in `log_path`: a worker warms up before its first run.
pub fn warm(engine: &crate::Engine, spec: &ControllerSpec, log_path: &Path) -> Result<(), SnapshotError> {
    parked(&mut engine.zygotes(), spec, log_path).map(|_| ())
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // Closing the control socket ends the zygote; kill it anyway.
        let _ = self.control.get_mut().flush();
        self.process.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shim_from_another_build_is_named_as_such() {
        assert_eq!(same_build(&format!("ready 42 build={}\n", sts_clockpage::SHIM_BUILD)), Ok(()));
        assert_eq!(same_build("ready 42 build=0123456789abcdef\n"), Err("0123456789abcdef".to_string()));
        assert_eq!(same_build("ready 42\n"), Err("unknown, older than build checks".to_string()));
        let e = SnapshotError::OtherBuild { path: "/opt/old/libsts_shim.so".into(), found: "0123456789abcdef".into() };
        let text = e.to_string();
        assert!(text.starts_with("/opt/old/libsts_shim.so was built from other sources than this sts"), "{text}");
        assert!(text.contains(sts_clockpage::SHIM_BUILD), "{text}");
    }
}
