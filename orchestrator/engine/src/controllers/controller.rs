//! Real controller processes: start from a command template, wait until they
//! listen, capture their output, and never leave one behind.
//!
//! Each controller runs in its own process group with a parent-death signal, so
//! it dies with sts even when sts is killed with SIGKILL; dropping a
//! [`Controller`] kills the whole group and reaps it.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How to start one controller: a command template and its environment.
///
/// Placeholders in the program, the arguments and the environment are replaced
/// when the controller is started: `{port}` and `{address}` (where it must
/// listen), `{config}`, `{socket_dir}` ([`socket_dir`]), `{run_dir}` (the directory of its log file, for sockets
/// and side files) and `{aux_port}` (a second free port, for side services such
/// as faucet's Prometheus exporter).
#[derive(Debug, Clone)]
pub struct ControllerSpec {
    /// A short name for messages and log files (`os-ken`, `faucet` ...).
    pub name: String,
    /// Program and arguments, with placeholders.
    pub command: Vec<String>,
    /// Extra environment variables, with the same placeholders.
    pub env: Vec<(String, String)>,
    /// Path substituted for `{config}`.
    pub config: Option<PathBuf>,
    /// How long to wait for the listening socket.
    pub start_timeout: Duration,
    /// The program may run the controller as a child of its own (a wrapper
    /// script that does not `exec`): a guard outside sts kills its whole
    /// process group when sts goes, however sts goes (even SIGKILL, which
    /// only takes the direct child down through PDEATHSIG). On for `command`
    /// controllers; the presets exec their controllers directly.
    pub guard_group: bool,
}

/// Why a controller could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("controller {name}: cannot run `{program}`: {source}")]
    Spawn { name: String, program: String, source: std::io::Error },
    #[error("controller {name} exited ({status}) before listening on {addr}; last log lines:\n{tail}")]
    Exited { name: String, addr: SocketAddr, status: String, tail: String },
    #[error("controller {name} did not listen on {addr} within {timeout:?}; last log lines:\n{tail}")]
    Timeout { name: String, addr: SocketAddr, timeout: Duration, tail: String },
    #[error("controller {name}: {context}: {source}")]
    Io { name: String, context: String, source: std::io::Error },
}

use crate::output::Output;
pub use crate::output::{LogLine, Stream, MAX_UNREAD_LINES};

/// How sts holds a controller process.
enum Process {
    /// Started by sts (its child).
    Spawned(Child),
    /// Forked by a zygote (`crate::snapshot`): not sts's child; the kernel
    /// reaps it, so it is alive while signals reach it.
    Forked(Pid),
    /// Not a process of sts's (`kind = "remote"`): never signalled.
    Remote,
}

impl Process {
    fn pid(&self) -> u32 {
        match self {
            Process::Spawned(c) => c.id(),
            Process::Forked(p) => p.as_raw() as u32,
            Process::Remote => 0,
        }
    }

    /// `Some(how it ended)` once the process has exited.
    fn exited(&mut self) -> Option<String> {
        match self {
            Process::Spawned(c) => c.try_wait().ok().flatten().map(|s| s.to_string()),
            Process::Forked(p) => {
                // A reaped process is gone; a zombie (never, here) would be dead too.
                let gone = nix::sys::signal::kill(*p, None).is_err();
                let zombie = std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')));
                (gone || zombie).then(|| "exited".to_string())
            }
            Process::Remote => None,
        }
    }

    fn kill(&mut self) {
        if matches!(self, Process::Remote) {
            return;
        }
        let _ = killpg(Pid::from_raw(self.pid() as i32), Signal::SIGKILL);
        match self {
            Process::Spawned(c) => {
                let _ = c.wait();
            }
            Process::Remote => {}
            Process::Forked(_) => {
                // Not ours to wait for: watch it go (SIGKILL is prompt).
                let until = Instant::now() + Duration::from_secs(2);
                while self.exited().is_none() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}

/// A running controller process (and its process group).
pub struct Controller {
    name: String,
    process: Process,
    addr: SocketAddr,
    aux_port: u16,
    log_path: PathBuf,
    /// Its stdout and stderr, copied into the log and taken as lines.
    output: Output,
    /// The shim's control socket in this process, for checkpoints (a copy
    /// forked on virtual time; `crate::snapshot::Checkpoint`).
    shim: Option<std::os::unix::net::UnixStream>,
    /// A checkpoint was taken: its holder (a fork) shares this process's
    /// output pipes, so they do not close when this process dies.
    checkpointed: bool,
    /// Kills the process group if sts goes first (`ControllerSpec::guard_group`).
    guard: Option<GroupGuard>,
    /// Control sockets it made, removed when it goes.
    sockets: Vec<PathBuf>,
}

/// The user this process runs as (the owner of `/proc/self`).
pub fn effective_uid() -> Option<u32> {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?).into()
}

/// A directory of this user's for controllers' control sockets
/// (`{socket_dir}`, `$TMPDIR/sts-sockets-UID`, owner-only): outside the
/// experiment, so that a socket left by a killed run never sits in an
/// experiment directory, and short, as a socket path must be (108 bytes).
/// `None` when it cannot be had safely (it exists and is someone else's):
/// then the log directory serves.
pub fn socket_dir() -> Option<&'static Path> {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let uid = effective_uid()?;
        let dir = std::env::temp_dir().join(format!("sts-sockets-{uid}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let meta = std::fs::symlink_metadata(&dir).ok()?;
        (meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0).then_some(dir)
    })
    .as_deref()
}

/// Has the process `cmd` starts get `signal` when the thread that spawns it
/// ends (spawn from [`spawn_from_long_lived_thread`]: a process-long
/// thread), and not start at all when this process is gone already by the
/// time the child has asked for that: a death between the fork and
/// `PR_SET_PDEATHSIG` would go unnoticed, and the child would outlive sts.
pub fn dies_with_this_process(cmd: &mut Command, signal: Signal) {
    let parent = std::process::id();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)?;
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::other("sts ended before this process started"));
            }
            Ok(())
        });
    }
}

/// Watches a controller's process group from outside sts (an [`ExitGuard`]
/// that kills the group).
struct GroupGuard {
    guard: ExitGuard,
}

impl GroupGuard {
    fn start(pgid: u32) -> std::io::Result<GroupGuard> {
        Ok(GroupGuard { guard: ExitGuard::start("kill -9 -\"$1\" 2>/dev/null", &[pgid.to_string()])? })
    }

    /// Stands the guard down (sts kills the group itself).
    fn dismiss(&mut self) {
        self.guard.dismiss();
    }
}

/// Clean-up that happens however sts ends: a `sh` blocked reading a pipe
/// whose only writer is sts. When sts exits (even by SIGKILL) the kernel
/// closes the pipe, the read returns, and the shell runs its command. It
/// lives in a process group of its own, so a signal to sts's group does not
/// take it down before it has cleaned up.
pub struct ExitGuard {
    shell: Child,
}

impl ExitGuard {
    /// Starts a guard that runs `script` (`sh -c`, with `args` as `$1`, `$2`
    /// ...) once sts is gone or [`ExitGuard::fire`] is called.
    pub fn start(script: &str, args: &[String]) -> std::io::Result<ExitGuard> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("read _; {script}"))
            .arg("sts-exit-guard")
            .args(args)
            // The pipe's write end stays in sts (close-on-exec: no other child holds it).
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        Ok(ExitGuard { shell: spawn_from_long_lived_thread(cmd)? })
    }

    /// Runs the guard's command now and waits for it to finish.
    pub fn fire(mut self) {
        drop(self.shell.stdin.take());
        let _ = self.shell.wait();
    }

    /// Stands the guard down without running its command.
    pub fn dismiss(&mut self) {
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

impl Controller {
    /// Starts `spec` listening on `addr`, appending its stdout and stderr to
    /// `log_path`, and waits until the port is bound.
    pub fn start(spec: &ControllerSpec, addr: SocketAddr, log_path: &Path) -> Result<Controller, StartError> {
        let mut ctl = Controller::spawn(spec, addr, log_path)?;
        ctl.wait_listening(spec.start_timeout)?;
        Ok(ctl)
    }

    /// Starts `spec` on a free loopback port without waiting for it to
    /// listen (a zygote says when it is ready: `crate::snapshot`).
    pub fn spawn_on_free_port(spec: &ControllerSpec, log_path: &Path) -> Result<Controller, StartError> {
        let addr = free_local_addr().map_err(|source| StartError::Io {
            name: spec.name.clone(),
            context: "finding a free port".into(),
            source,
        })?;
        Controller::spawn(spec, addr, log_path)
    }

    /// Starts `spec` to listen on `addr`, without waiting for it to.
    fn spawn(spec: &ControllerSpec, addr: SocketAddr, log_path: &Path) -> Result<Controller, StartError> {
        let name = spec.name.clone();
        let io_err = |context: String| {
            let name = name.clone();
            move |source| StartError::Io { name, context, source }
        };
        // Never the OpenFlow port: a controller whose listeners share a port
        // (eventlet sets SO_REUSEPORT, so both binds succeed) splits the
        // switches' connections between its REST API and OpenFlow.
        let aux_port = free_local_port_except(addr.port()).unwrap_or(0);
        // Absolute: programs resolve a relative path against their own idea of
        // a base (ovs-testcontroller puts a relative --unixctl under
        // /var/run/openvswitch).
        let run_dir = log_path.parent().unwrap_or(Path::new("."));
        let run_dir = std::path::absolute(run_dir).unwrap_or_else(|_| run_dir.to_owned()).display().to_string();
        let fill = |s: &str| {
            let mut s = s
                .replace("{port}", &addr.port().to_string())
                .replace("{address}", &addr.ip().to_string())
                .replace("{aux_port}", &aux_port.to_string())
                .replace("{run_dir}", &run_dir)
                .replace("{socket_dir}", &socket_dir().map_or_else(|| run_dir.clone(), |d| d.display().to_string()));
            if let Some(c) = &spec.config {
                s = s.replace("{config}", &c.display().to_string());
            }
            s
        };
        let log = File::create(log_path).map_err(io_err(format!("creating {}", log_path.display())))?;
        let program = fill(&spec.command[0]);
        let mut cmd = Command::new(&program);
        cmd.args(spec.command[1..].iter().map(|a| fill(a)))
            .envs(spec.env.iter().map(|(k, v)| (k, fill(v))))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        dies_with_this_process(&mut cmd, Signal::SIGKILL);
        // Sockets it is told to make (`--unixctl=PATH`): removed when it goes.
        let sockets: Vec<PathBuf> =
            spec.command[1..].iter().filter_map(|a| fill(a).strip_prefix("--unixctl=").map(PathBuf::from)).collect();
        let mut child = spawn_from_long_lived_thread(cmd).map_err(|source| StartError::Spawn {
            name: name.clone(),
            program,
            source,
        })?;
        let guard = match spec.guard_group {
            true => Some(GroupGuard::start(child.id()).map_err(io_err("starting its process-group guard".into()))?),
            false => None,
        };
        // Each output line goes to the log file and becomes a LogLine event.
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("both streams are piped")
        };
        let output = Output::start(out.into(), err.into(), log).map_err(io_err("copying its output".into()))?;
        Ok(Controller {
            name,
            process: Process::Spawned(child),
            addr,
            aux_port,
            log_path: log_path.to_owned(),
            output,
            shim: None,
            checkpointed: false,
            guard,
            sockets,
        })
    }

    /// Takes charge of a controller a zygote forked (`crate::snapshot`):
    /// process `pid` (its own process group) listening on `addr`, writing
    /// into `stdout` and `stderr`, whose lines go to `log_path` and become
    /// events as for a started controller.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt_forked(
        name: &str,
        pid: u32,
        addr: SocketAddr,
        aux_port: u16,
        log_path: &Path,
        stdout: File,
        stderr: File,
        shim: Option<std::os::unix::net::UnixStream>,
    ) -> std::io::Result<Controller> {
        let output = Output::start(stdout.into(), stderr.into(), File::create(log_path)?)?;
        let process = Process::Forked(Pid::from_raw(pid as i32));
        Ok(Controller {
            name: name.to_string(),
            process,
            addr,
            aux_port,
            log_path: log_path.to_owned(),
            output,
            shim,
            checkpointed: false,
            guard: None,
            sockets: Vec::new(),
        })
    }

    /// A controller sts did not start, listening on `addr` (`kind =
    /// "remote"`). Its log file says so; it has no output to follow.
    pub fn remote(addr: SocketAddr, log_path: &Path) -> std::io::Result<Controller> {
        std::fs::write(
            log_path,
            format!("a remote controller at {addr}: sts did not start it and has no log of it\n"),
        )?;
        Ok(Controller {
            name: "remote".to_string(),
            process: Process::Remote,
            addr,
            aux_port: 0,
            log_path: log_path.to_owned(),
            output: Output::none(),
            shim: None,
            checkpointed: false,
            guard: None,
            sockets: Vec::new(),
        })
    }

    /// Starts `spec` on a free loopback port. A free port can be taken between
    /// choosing it and the controller binding it; if the controller exits saying
    /// so, it is retried on another port (up to three times).
    pub fn start_on_free_port(spec: &ControllerSpec, log_path: &Path) -> Result<Controller, StartError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let addr = free_local_addr().map_err(|source| StartError::Io {
                name: spec.name.clone(),
                context: "finding a free port".into(),
                source,
            })?;
            match Controller::start(spec, addr, log_path) {
                Err(StartError::Exited { tail, .. }) if attempt < 3 && tail.contains("Address already in use") => {
                    continue
                }
                other => return other,
            }
        }
    }

    fn wait_listening(&mut self, timeout: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exited() {
                // Let the copying threads write the last lines before quoting them.
                self.drain_output(Duration::from_secs(1));
                return Err(StartError::Exited {
                    name: self.name.clone(),
                    addr: self.addr,
                    status,
                    tail: self.log_tail(20),
                });
            }
            if group_listens(self.process.pid(), self.addr) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(StartError::Timeout {
                    name: self.name.clone(),
                    addr: self.addr,
                    timeout,
                    tail: self.log_tail(20),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address the controller listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The lines the controller has written since the last call, in order
    /// per stream: every line it finished before this call
    /// ([`crate::output`] says why that takes reading the pipes here).
    pub fn take_log_lines(&self) -> Vec<LogLine> {
        self.output.take_lines()
    }

    /// The port substituted for `{aux_port}` (a side service such as a REST API).
    pub fn aux_port(&self) -> u16 {
        self.aux_port
    }

    /// The process id (also the process group id); 0 for a remote
    /// controller ([`Controller::is_remote`]).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// True while the process is running.
    pub fn is_alive(&mut self) -> bool {
        self.process.exited().is_none()
    }

    /// The last `n` lines of the controller's log.
    pub fn log_tail(&self, n: usize) -> String {
        tail_lines(&self.log_path, n)
    }

    /// The shim's control socket, if sts can command this process (a copy
    /// forked on virtual time).
    pub(crate) fn shim_control(&mut self) -> Option<&mut std::os::unix::net::UnixStream> {
        self.shim.as_mut()
    }

    /// The controller's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// SIGKILLs the process group and reaps the process.
    pub fn kill(&mut self) {
        // The guard first: it must not outlive the group it names.
        if let Some(g) = self.guard.as_mut() {
            g.dismiss();
        }
        self.process.kill();
    }

    /// Sends the controller's process group SIGKILL without waiting for it
    /// to go (dropping the controller waits). A killed process never runs
    /// its own code again.
    pub(crate) fn stop(&mut self) {
        if !self.is_remote() {
            let group = self.process.pid();
            // Its teardown (freeing a whole controller's memory) runs on a
            // core of its own: at the lowest priority, so that whatever
            // starts next (a rollback's copies) is not kept waiting by it.
            // SAFETY: setpriority on a process group id, no memory involved.
            unsafe { libc::setpriority(libc::PRIO_PGRP, group as libc::id_t, 19) };
            let _ = killpg(Pid::from_raw(group as i32), Signal::SIGKILL);
        }
    }

    /// True for a controller sts did not start (`kind = "remote"`): it has
    /// no process of sts's to signal, fork or checkpoint.
    pub fn is_remote(&self) -> bool {
        matches!(self.process, Process::Remote)
    }

    /// Marks that a checkpoint holder shares this process's output pipes.
    pub(crate) fn mark_checkpointed(&mut self) {
        self.checkpointed = true;
    }

    fn drain_output(&self, within: Duration) {
        let until = Instant::now() + within;
        while !self.output.read_to_end() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
        // Let the copying threads write what it printed last (they end when
        // the pipes close), so a log read after the run, even after sts
        // exits, has every line. Not when a checkpoint holder shares the
        // pipes: they stay open as long as it lives.
        if !self.checkpointed {
            self.drain_output(Duration::from_millis(500));
            // A checkpoint's copy still serves on the socket; otherwise nobody does.
            for s in &self.sockets {
                let _ = std::fs::remove_file(s);
            }
        }
    }
}

/// Spawns `cmd` from one thread that lives as long as the process.
///
/// PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not
/// the process: a controller spawned from a short-lived thread (a scoped
/// thread, tokio's blocking pool) would be killed when that thread ends. All
/// spawns therefore go through this thread, which exits only with sts.
pub fn spawn_from_long_lived_thread(cmd: Command) -> std::io::Result<Child> {
    type Job = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sts-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("cannot start the process-spawning thread");
        std::sync::Mutex::new(tx)
    });
    let (reply_tx, reply_rx) = std::sync::mpsc::channel();
    let sent = spawner.lock().map_err(|_| std::io::Error::other("spawner lock poisoned"))?.send((cmd, reply_tx));
    sent.map_err(|_| std::io::Error::other("the spawning thread is gone"))?;
    reply_rx.recv().map_err(|_| std::io::Error::other("the spawning thread is gone"))?
}

/// The last `n` lines of a file (best effort, reads at most the last 64 KiB).
pub fn tail_lines(path: &Path, n: usize) -> String {
    let Ok(mut f) = File::open(path) else { return String::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut s = String::new();
    let _ = BufReader::new(f).take(64 * 1024).read_to_string(&mut s);
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// True if some socket is in LISTEN state on `addr` (or on the wildcard address
/// with the same port). Asks the kernel ([`crate::listeners`]) rather than
/// connecting, since a connection would look like a switch to the controller.
pub fn is_listening(addr: SocketAddr) -> bool {
    !crate::listeners::inodes(addr.port()).is_empty()
}

/// True if a process of group `pgid` holds a socket listening on `addr`'s
/// port. Someone else's listener does not count: a port chosen free can be
/// taken before the controller binds it (by another sts on the machine),
/// and then the controller fails to bind while the port looks taken.
pub fn group_listens(pgid: u32, addr: SocketAddr) -> bool {
    let inodes = crate::listeners::inodes(addr.port());
    if inodes.is_empty() {
        return false;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let holds = |pid: &str| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| wanted.iter().any(|w| target.as_os_str() == w.as_str()))
        })
    };
    // The leader first: it is the listener unless a wrapper runs the controller.
    if holds(&pgid.to_string()) {
        return true;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { return false };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { return false };
        // pid (comm) state ppid pgrp ...
        let pgrp = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(2));
        pgrp == Some(pgid.to_string().as_str()) && pid != pgid.to_string() && holds(pid)
    })
}

/// Raises this process's soft limit on open files to its hard limit (one
/// socket per switch-controller connection adds up quickly; controllers started
/// afterwards inherit the limit). Returns the new soft limit.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    Ok(hard)
}

/// A loopback address with a port that is free right now.
pub fn free_local_addr() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// A loopback port that is free right now and is not `taken` (which may be
/// free too, not yet bound: the kernel can hand it out again).
pub fn free_local_port_except(taken: u16) -> std::io::Result<u16> {
    // Held until a port other than `taken` comes, so the kernel moves on.
    let mut held = Vec::new();
    loop {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        if port != taken {
            return Ok(port);
        }
        held.push(l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_is_detected_without_connecting() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        assert!(is_listening(addr));
        drop(l);
        assert!(!is_listening(addr));
    }

    /// Another process took the chosen port first (four sts at once did,
    /// under load): the controller fails to bind, and someone else's
    /// listener must not pass for its own. Before, the start "succeeded" and
    /// the run went on without a controller. With a `python3` that sleeps
    /// before binding, the test's listener is up all along.
    #[test]
    fn a_port_someone_else_listens_on_is_not_the_controllers() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let bind = "import socket,time\ntime.sleep(0.2)\ns=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)";
        let spec = ControllerSpec {
            name: "late".into(),
            command: vec!["python3".into(), "-c".into(), bind.into()],
            env: vec![],
            config: None,
            start_timeout: Duration::from_secs(10),
            guard_group: false,
        };
        let dir = std::env::temp_dir().join(format!("sts-ctl-taken-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Controller::start(&spec, addr, &dir.join("late.log")).err().expect("the port was not its own");
        assert!(err.to_string().contains("Address already in use"), "{err}");
        // Its own listener, through a wrapper shell (another process of its group), counts.
        drop(taken);
        let wrapped = ControllerSpec {
            command: vec!["sh".into(), "-c".into(), format!("python3 -c \"{bind}\"; true")],
            guard_group: true,
            ..spec
        };
        let mut ctl = Controller::start(&wrapped, addr, &dir.join("wrapped.log")).expect("listens");
        assert!(group_listens(ctl.pid(), addr));
        ctl.kill();
    }

    #[test]
    fn a_controller_that_exits_reports_its_log() {
        let spec = ControllerSpec {
            name: "broken".into(),
            command: vec!["sh".into(), "-c".into(), "echo cannot bind port {port} >&2; exit 3".into()],
            env: vec![],
            config: None,
            start_timeout: Duration::from_secs(5),
            guard_group: false,
        };
        let dir = std::env::temp_dir().join(format!("sts-ctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let addr = free_local_addr().unwrap();
        let err = Controller::start(&spec, addr, &dir.join("broken.log")).err().expect("must fail");
        let msg = err.to_string();
        assert!(msg.contains("exited") && msg.contains(&format!("cannot bind port {}", addr.port())), "{msg}");
    }

    #[test]
    fn a_controller_outlives_the_thread_that_started_it() {
        let spec = ControllerSpec {
            name: "listener".into(),
            command: vec![
                "python3".into(),
                "-c".into(),
                "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)"
                    .into(),
            ],
            env: vec![],
            config: None,
            start_timeout: Duration::from_secs(10),
            guard_group: false,
        };
        let log = std::env::temp_dir().join(format!("sts-outlive-{}.log", std::process::id()));
        let addr = free_local_addr().unwrap();
        let mut ctl = std::thread::spawn(move || Controller::start(&spec, addr, &log).unwrap()).join().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(ctl.is_alive(), "the controller died with the thread that started it");
        ctl.kill();
        assert!(!ctl.is_alive());
    }

    #[test]
    fn output_lines_become_events_with_masked_fingerprints_and_reach_the_log() {
        let spec = ControllerSpec {
            name: "chatty".into(),
            command: vec![
                "python3".into(),
                "-c".into(),
                "import socket,sys,time\nprint('switch 0x1a connected from 10.0.0.7:4242', flush=True)\nprint('error 42', file=sys.stderr, flush=True)\ns=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(30)".into(),
            ],
            env: vec![],
            config: None,
            start_timeout: Duration::from_secs(10),
            guard_group: false,
        };
        let log = std::env::temp_dir().join(format!("sts-chatty-{}.log", std::process::id()));
        let ctl = Controller::start(&spec, free_local_addr().unwrap(), &log).unwrap();
        let mut lines = Vec::new();
        for _ in 0..100 {
            lines.extend(ctl.take_log_lines());
            if lines.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = lines.iter().find(|l| l.stream == Stream::Stdout).expect("stdout line");
        assert_eq!(out.line, "switch 0x1a connected from 10.0.0.7:4242");
        assert_eq!(out.fingerprint, "switch # connected from #");
        let err = lines.iter().find(|l| l.stream == Stream::Stderr).expect("stderr line");
        assert_eq!(err.fingerprint, "error #");
        assert!(ctl.log_tail(5).contains("switch 0x1a connected"));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error() {
        let spec = ControllerSpec {
            name: "ghost".into(),
            command: vec!["/nonexistent/controller".into()],
            env: vec![],
            config: None,
            start_timeout: Duration::from_secs(1),
            guard_group: false,
        };
        let log = std::env::temp_dir().join(format!("sts-ghost-{}.log", std::process::id()));
        let err = Controller::start(&spec, free_local_addr().unwrap(), &log).err().unwrap();
        assert!(matches!(err, StartError::Spawn { .. }), "{err}");
    }
}
