//! Pristine snapshots against process starts, side by side: how long until a
//! controller answers a new connection with its OpenFlow HELLO, when started
//! as a new process and when forked from its parked zygote (`sts-shim`).
//!
//! `cargo build --release -p sts-shim && cargo run --release -p sts --example snapshot_bench -- 5`
//! (rounds per controller, default 5; a second argument keeps only the
//! controllers whose name contains it, e.g. `5 c65faucet`; `KEEP=1` keeps
//! the controllers' logs in the temporary directory). Results: docs/benchmarks.md.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sts_engine::controller::{Controller, ControllerSpec};
use sts_engine::presets;
use sts_engine::snapshot::Zygote;

/// Waits until `addr` greets a new connection with an OpenFlow HELLO.
fn until_hello(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(addr) {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut h = [0u8; 8];
            if s.read_exact(&mut h).is_ok() && h[1] == 0 {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("{addr} never said HELLO");
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn bench(name: &str, spec: ControllerSpec, rounds: usize) {
    if std::env::args().nth(2).is_some_and(|only| !name.contains(&only)) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("sts-snapshot-bench-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut starts = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let c = Controller::start_on_free_port(&spec, &dir.join(format!("start-{i}.log"))).unwrap();
        until_hello(c.addr());
        starts.push(t.elapsed());
    }
    let t = Instant::now();
    let mut z = Zygote::start(&spec, &dir.join("zygote.log")).unwrap();
    let parking = t.elapsed();
    let mut forks = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let c = z.fork(&dir.join(format!("fork-{i}.log")), None).unwrap();
        until_hello(c.addr());
        forks.push(t.elapsed());
    }
    let (s, f) = (median(starts), median(forks));
    println!(
        "{name:<20} process start {:>8.1} ms   snapshot resume {:>6.2} ms   {:>6.0}x faster   (zygote parked once in {:.1} ms; medians of {rounds})",
        s.as_secs_f64() * 1e3,
        f.as_secs_f64() * 1e3,
        s.as_secs_f64() / f.as_secs_f64(),
        parking.as_secs_f64() * 1e3
    );
    if std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    bench("os-ken 1.3 learning", presets::os_ken(&["os_ken.app.simple_switch_13"]), rounds);
    bench("ovs-testcontroller", presets::ovs_testcontroller(&[]), rounds);
    // faucet and c65faucet need their generated faucet.yaml: take the spec a config gives.
    for kind in ["faucet", "c65faucet"] {
        let toml = format!(
            "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"{kind}\"\n"
        );
        let config = sts_engine::config::Config::from_toml(&toml, std::path::Path::new("bench.toml")).unwrap();
        let files = std::env::temp_dir().join(format!("sts-snapshot-bench-{}-{kind}-files", std::process::id()));
        std::fs::create_dir_all(&files).unwrap();
        bench(kind, sts_engine::presets::specs(&config, &files).unwrap().remove(0), rounds);
        let _ = std::fs::remove_dir_all(&files);
    }
}
