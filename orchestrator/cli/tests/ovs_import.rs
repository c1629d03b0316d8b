//! Record in a real testbed, replay in the lab: Open vSwitch bridges (Debian's
//! openvswitch-switch, userspace datapath, hosts in network namespaces; built
//! by scripts/ovs-testbed as the config's network) connected to os-ken
//! through `sts proxy --record`; pings and a link failure and recovery in the
//! testbed; `sts import` makes the recording an experiment whose replays on
//! the mock network send the controller-to-switch messages the controller
//! sent to Open vSwitch.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A process ended when dropped (SIGTERM first: the proxy flushes its recording).
struct Running(Child);

impl Running {
    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The testbed, taken down when dropped (even when an assertion fails).
struct Testbed(PathBuf);

/// A testbed's bridges are named s1, s2 ... in the host's namespace (their
/// internal ports): two testbeds at once would collide, so the tests here
/// take turns.
static ONE_TESTBED: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Testbed {
    fn run(&self, args: &[&str]) {
        let out = Command::new(workspace().join("scripts/ovs-testbed"))
            .arg(args[0])
            .arg(&self.0)
            .args(&args[1..])
            .env("STS", env!("CARGO_BIN_EXE_sts"))
            .output()
            .expect("run scripts/ovs-testbed");
        assert!(
            out.status.success(),
            "ovs-testbed {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("scripts/ovs-testbed")).arg("down").arg(&self.0).output();
    }
}

fn wait_listening(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A fresh directory for a test (`kind`) and, in it, the config of a linear
/// network of three switches under os-ken's learning switch.
fn linear_three(kind: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("sts-ovs-{kind}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("linear.toml");
    std::fs::write(
        &config,
        "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n\n\
         [[controllers]]\nkind = \"os-ken\"\napps = [\"os_ken.app.simple_switch_13\"]\n",
    )
    .unwrap();
    (dir, config)
}

/// os-ken's learning switch listening on `port`, its output in `dir`; once it listens.
fn simple_switch(dir: &Path, port: u16) -> Running {
    let log = |name: &str| Stdio::from(std::fs::File::create(dir.join(name)).unwrap());
    let osken = Running(
        Command::new(workspace().join(".local/osken/bin/osken-manager"))
            .args(["--ofp-tcp-listen-port", &port.to_string(), "os_ken.app.simple_switch_13"])
            .stdout(log("osken.log"))
            .stderr(log("osken.err"))
            .spawn()
            .expect("os-ken (scripts/setup installs it)"),
    );
    wait_listening(port);
    osken
}

#[test]
fn an_open_vswitch_session_imports_and_replays_the_controllers_messages() {
    let _turn = ONE_TESTBED.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, config) = linear_three("import");
    let (controller_port, proxy_port) = (free_port(), free_port());
    let log = |name: &str| Stdio::from(std::fs::File::create(dir.join(name)).unwrap());
    let osken = simple_switch(&dir, controller_port);
    let recording = dir.join("recording.jsonl");
    let mut proxy = Running(
        Command::new(env!("CARGO_BIN_EXE_sts"))
            .args(["proxy", "--listen", &format!("127.0.0.1:{proxy_port}")])
            .args(["--controller", &format!("127.0.0.1:{controller_port}")])
            .arg("--record")
            .arg(&recording)
            .stderr(log("proxy.log"))
            .spawn()
            .unwrap(),
    );
    wait_listening(proxy_port);

    let testbed = Testbed(dir.join("ovs"));
    testbed.run(&["up", config.to_str().unwrap(), &format!("127.0.0.1:{proxy_port}")]);
    testbed.run(&["wait", "3"]);
    std::thread::sleep(Duration::from_secs(1));
    testbed.run(&["ping", "h1", "h3"]);
    testbed.run(&["ping", "h3", "h2"]);
    testbed.run(&["link", "down", "2", "3"]);
    std::thread::sleep(Duration::from_secs(1));
    testbed.run(&["ping", "h1", "h2"]);
    testbed.run(&["link", "up", "2", "3"]);
    std::thread::sleep(Duration::from_secs(1));
    proxy.stop();
    drop((testbed, osken));

    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .arg("import")
        .arg(&recording)
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(dir.join("imported"))
        .args(["--check", "10"])
        .output()
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    for input in ["ping h1 -> h3", "ping h3 -> h2", "link down s2:3-s3:2", "ping h1 -> h2", "link up s2:3-s3:2"] {
        assert!(said.contains(input), "{input} inferred: {said}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("imported/import.json")).unwrap()).unwrap();
    let same = report["check"]["same_to_switch"].as_u64().unwrap();
    assert!(same >= 9, "{same}/10 replays sent the recorded controller-to-switch messages: {said}");
    // Where Open vSwitch and the mock switch differ, the import says so
    // (its FEATURES_REPLY offers 254 tables, the mock's 16).
    assert!(said.contains("mock vs testbed") && said.contains("\"n_tables\":254"), "{said}");
}

/// `ovs-ofctl` on one of the testbed's bridges.
fn ofctl(testbed: &Testbed, args: &[&str]) -> std::process::Output {
    Command::new("ovs-ofctl")
        .args(["-O", "OpenFlow13"])
        .args(args)
        .env("OVS_RUNDIR", testbed.0.join("run"))
        .output()
        .expect("ovs-ofctl runs (scripts/setup installs Open vSwitch)")
}

/// A testbed's tables, dumped by `scripts/ovs-testbed dump`, checked by
/// `sts verify` on the config's network: a learning switch's tables after
/// pings hold no violation; a drop rule added by hand on the middle bridge
/// is a blackhole, its culprit that rule.
#[test]
fn a_testbeds_dumped_tables_are_checked_on_its_network() {
    let _turn = ONE_TESTBED.lock().unwrap_or_else(|e| e.into_inner());
    let (dir, config) = linear_three("verify");
    let controller_port = free_port();
    let osken = simple_switch(&dir, controller_port);
    let testbed = Testbed(dir.join("ovs"));
    testbed.run(&["up", config.to_str().unwrap(), &format!("127.0.0.1:{controller_port}")]);
    testbed.run(&["wait", "3"]);
    std::thread::sleep(Duration::from_secs(1));
    testbed.run(&["ping", "h1", "h3"]);
    testbed.run(&["ping", "h3", "h2"]);
    let verify =
        |out: &Path| Command::new(env!("CARGO_BIN_EXE_sts")).arg("verify").arg(out).output().expect("run sts verify");
    let healthy = dir.join("healthy");
    testbed.run(&["dump", healthy.to_str().unwrap()]);
    let flows = std::fs::read_to_string(healthy.join("s2.flows")).expect("s2's dump");
    assert!(flows.contains("actions=output:"), "learned flows on s2: {flows}");
    let out = verify(&healthy);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("the tables of 3 bridges") && said.contains("no violation in these tables"), "{said}");

    let h3_ip = std::fs::read_to_string(testbed.0.join("wiring"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host h3 ").and_then(|rest| rest.split_whitespace().nth(3).map(String::from)))
        .expect("h3 in the wiring");
    let added = ofctl(&testbed, &["add-flow", "s2", &format!("priority=65535,ip,nw_dst={h3_ip},actions=drop")]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let broken = dir.join("broken");
    testbed.run(&["dump", broken.to_str().unwrap()]);
    drop((testbed, osken));
    let out = verify(&broken);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("blackhole: h1 -> h3: ") && said.contains("is dropped at s2"), "{said}");
    assert!(said.contains("culprit: s2 table 0: a rule of priority 65535"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
