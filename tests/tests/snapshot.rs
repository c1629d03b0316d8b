//! Pristine snapshots: a real controller parked by the shim is forked into
//! fresh copies, each on a port of its own, each a working OpenFlow
//! controller; copies die with their zygote.

use std::io::Read;
use std::net::TcpStream;
use std::time::Duration;

use sts_engine::presets;
use sts_engine::snapshot::Zygote;

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sts-e2e-snapshot-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Connects to a controller and reads its first message: an OpenFlow HELLO.
fn says_hello(addr: std::net::SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else { return false };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut header = [0u8; 8];
    s.read_exact(&mut header).is_ok() && header[1] == 0 // OFPT_HELLO
}

fn forks_side_by_side(spec: sts_engine::controller::ControllerSpec, name: &str) {
    let d = dir(name);
    let mut z = Zygote::start(&spec, &d.join("zygote.log")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut a = z.fork(&d.join("a.log"), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut b = z.fork(&d.join("b.log"), None).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_ne!(a.addr(), b.addr(), "each copy listens on its own port");
    assert_ne!(a.addr(), z.addr());
    assert!(says_hello(a.addr()), "{name}: copy a does not speak OpenFlow");
    assert!(says_hello(b.addr()), "{name}: copy b does not speak OpenFlow");
    assert!(!says_hello(z.addr()), "{name}: the parked zygote must not serve");
    assert!(a.is_alive() && b.is_alive());
    a.kill();
    assert!(!a.is_alive());
    assert!(b.is_alive(), "killing one copy leaves the others");
    let c = z.fork(&d.join("c.log"), None).unwrap();
    assert!(says_hello(c.addr()), "{name}: a copy forked after another died works");
    assert_eq!(z.forks(), 3);
    let (bp, cp) = (b.pid(), c.pid());
    drop(z);
    std::thread::sleep(Duration::from_millis(300));
    for pid in [bp, cp] {
        // Gone, or a zombie waiting for whoever adopted it.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit(')').next().unwrap_or("").trim().chars().next().unwrap_or('?'));
        assert!(matches!(state, Err(_) | Ok('Z')), "{name}: copy {pid} outlived its zygote (state {state:?})");
    }
}

#[test]
fn os_ken_forks_into_working_copies() {
    forks_side_by_side(presets::os_ken_with(&[], &["os_ken.app.simple_switch_13"]), "osken");
}

#[test]
fn ovs_testcontroller_forks_into_working_copies() {
    forks_side_by_side(presets::ovs_testcontroller(&[]), "ovs");
}

#[test]
fn faucet_forks_into_working_copies() {
    // faucet needs its generated faucet.yaml: take the spec a config gives.
    let toml = "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"faucet\"\n";
    let config = sts_engine::config::Config::from_toml(toml, std::path::Path::new("faucet.toml")).unwrap();
    let specs = config.controller_specs(&dir("faucet-files")).unwrap();
    forks_side_by_side(specs[0].clone(), "faucet");
}

/// c65faucet starts threads before it listens: its zygote parks before the
/// first one, and each copy starts its threads and binds its listeners (on
/// ports of its own) itself.
#[test]
fn c65faucet_forks_into_working_copies() {
    let toml =
        "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"c65faucet\"\n";
    let config = sts_engine::config::Config::from_toml(toml, std::path::Path::new("c65faucet.toml")).unwrap();
    let specs = config.controller_specs(&dir("c65faucet-files")).unwrap();
    forks_side_by_side(specs[0].clone(), "c65faucet");
}

/// Experiment directories can be deep (a minimization's runs live in
/// `DIR/mcs/runs/N/logs`); the zygote's control socket must not inherit a
/// path longer than a Unix socket allows (108 bytes).
#[test]
fn a_zygote_logging_deep_in_the_tree_still_parks() {
    let deep = dir("deep").join("a-directory-name-of-some-length/".repeat(5));
    std::fs::create_dir_all(&deep).unwrap();
    let log = deep.join("controller-0-ovs-testcontroller-zygote.log");
    assert!(log.as_os_str().len() > 108);
    let mut z = Zygote::start(&presets::ovs_testcontroller(&[]), &log).unwrap_or_else(|e| panic!("{e}"));
    let copy = z.fork(&deep.join("copy.log"), None).unwrap();
    assert!(says_hello(copy.addr()));
}
