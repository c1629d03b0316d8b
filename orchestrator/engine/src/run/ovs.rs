//! A real Open vSwitch testbed shaped like a config's network, driven through
//! `scripts/ovs-testbed` (one bridge per switch, veth links, a namespace per
//! host, ports numbered as sts numbers them): the real-switch counterpart of
//! [`crate::netrun`]'s mock network, for replaying a trace's inputs on real
//! switches (`sts replay DIR --on ovs`, [`crate::on_ovs`]).
//!
//! The script is the one implementation of the testbed (a QA engineer uses it
//! by hand too); this module runs it and owns its life: an [`ExitGuard`]
//! started before the testbed comes up runs `ovs-testbed down` however sts
//! ends, SIGKILL included, so no bridge, namespace, veth or OVS daemon is
//! left behind.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::controller::ExitGuard;

/// Where the testbed script is: `$STS_OVS_TESTBED`, or `scripts/ovs-testbed`
/// of the workspace sts was built from (as [`crate::presets::local_dir`]).
pub fn script() -> PathBuf {
    std::env::var_os("STS_OVS_TESTBED")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ovs-testbed"))
}

/// A testbed that is up; [`Testbed::down`] (or sts's end, however it comes)
/// takes it down.
pub struct Testbed {
    dir: PathBuf,
    script: PathBuf,
    guard: Option<ExitGuard>,
}

impl Testbed {
    /// Builds `config`'s network under `dir` with Open vSwitch and connects
    /// every bridge to `controllers`. Needs root (veths, namespaces) and
    /// Open vSwitch (`scripts/setup` installs it).
    pub fn up(dir: &Path, config: &Path, controllers: &[SocketAddr]) -> Result<Testbed, String> {
        let script = script();
        if !script.is_file() {
            return Err(format!(
                "the testbed script {} is missing (set STS_OVS_TESTBED to scripts/ovs-testbed)",
                script.display()
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let dir = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
        // The guard first: a testbed half built when sts dies comes down too.
        let guard = ExitGuard::start(
            "exec \"$1\" down \"$2\" >/dev/null 2>&1",
            &[script.display().to_string(), dir.display().to_string()],
        )
        .map_err(|e| format!("cannot start the testbed's clean-up guard: {e}"))?;
        let testbed = Testbed { dir, script, guard: Some(guard) };
        let addrs: Vec<String> = controllers.iter().map(SocketAddr::to_string).collect();
        testbed.run(&["up", &config.display().to_string(), &addrs.join(",")])?;
        Ok(testbed)
    }

    /// The testbed's directory (OVS's database, logs and sockets, the wiring).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// One script command on this testbed (`ovs-testbed ARG0 DIR ARGS...`),
    /// to run where blocking is fine.
    pub fn command(&self, args: &[&str]) -> ScriptCommand {
        ScriptCommand {
            script: self.script.clone(),
            dir: self.dir.clone(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Runs one script command to its end; the error is what it said.
    pub fn run(&self, args: &[&str]) -> Result<(), String> {
        self.command(args).run()
    }

    /// Starts `src` pinging `dst` once (the mock's 8-byte payload); its exit
    /// status says whether an answer came within 2 s.
    pub fn ping(&self, src: &str, dst: &str) -> Result<Child, String> {
        self.command(&["ping", src, dst])
            .to_command()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.script.display()))
    }

    /// Takes the testbed down now, and waits until it is (as dropping it
    /// does).
    pub fn down(self) {
        drop(self);
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Some(g) = self.guard.take() {
            g.fire();
        }
    }
}

/// A script command, owned, so that it can run on a blocking thread.
pub struct ScriptCommand {
    script: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
}

impl ScriptCommand {
    fn to_command(&self) -> Command {
        let mut cmd = Command::new(&self.script);
        cmd.arg(&self.args[0]).arg(&self.dir).args(&self.args[1..]);
        // The script asks this very sts for the config's wiring (unless
        // its file was replaced by a rebuild while it runs: then the
        // script's own default).
        if let Ok(exe) = std::env::current_exe().and_then(|e| e.canonicalize()) {
            cmd.env("STS", exe);
        }
        cmd
    }

    /// Runs it to its end; the error is what it said.
    pub fn run(self) -> Result<(), String> {
        let out = self
            .to_command()
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.script.display()))?;
        if out.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said.trim();
        Err(format!(
            "`ovs-testbed {}` failed ({}){}",
            self.args.join(" "),
            out.status,
            if said.is_empty() { String::new() } else { format!(": {}", sts_trace::bounded_message(said.into(), 600)) }
        ))
    }
}
