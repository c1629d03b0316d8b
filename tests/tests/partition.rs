//! Controller partitions through `[[relays]]`: a real controller process is
//! given the relay's address (`{relay:NAME}`), and the fuzzer's partition
//! inputs block and heal what crosses it, with nothing lost.
//!
//! The peer is a plain echo service standing in for a second controller's
//! cluster port: the relay is generic TCP, so what it carries does not matter.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use sts_engine::config::Config;
use sts_engine::netrun::Settle;
use sts_engine::{inputs, session};
use sts_trace::External;

/// An echo service on a free port (a thread per connection).
fn echo_peer() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = s;
                let _ = std::io::copy(&mut r, &mut w);
            });
        }
    });
    addr
}

fn read_some(s: &mut TcpStream, n: usize, within: Duration) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf).ok().map(|_| buf)
}

#[test]
fn a_partition_input_blocks_the_relay_a_controller_was_given_and_healing_delivers_what_waited() {
    let peer = echo_peer();
    let run_dir = std::env::temp_dir().join(format!("sts-e2e-partition-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run_dir);
    // A real controller (ovs-testcontroller) whose command line receives the
    // relay's address; it writes it down where the test can read it.
    let toml = format!(
        r#"
[network]
topology = "linear"
size = 2

[[controllers]]
kind = "command"
command = ["sh", "-c", "echo {{relay:to-peer}} > {{run_dir}}/peer-address; exec ovs-testcontroller --unixctl={{run_dir}}/c.ctl ptcp:{{port}}:{{address}}"]

[[relays]]
name = "to-peer"
to = "{peer}"
"#
    );
    let config = Config::from_toml(&toml, std::path::Path::new("partition.toml")).unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut s = rt
        .block_on(session::start_with(
            sts_e2e::engine(),
            &config,
            &run_dir,
            Settle { quiet_ms: 200, min_wait_ms: 0, max_ms: 10_000 },
        ))
        .unwrap_or_else(|e| panic!("{e}"));

    let given = std::fs::read_to_string(run_dir.join("peer-address")).unwrap();
    let relay_addr = s.relays["to-peer"].addr();
    assert_eq!(given.trim(), relay_addr.to_string(), "the controller was given the relay's address");

    let mut conn = TcpStream::connect(relay_addr).unwrap();
    conn.write_all(b"hello").unwrap();
    assert_eq!(read_some(&mut conn, 5, Duration::from_secs(2)).as_deref(), Some(&b"hello"[..]));

    rt.block_on(inputs::apply(&mut s, &External::Partition { relay: "to-peer".into() })).unwrap();
    conn.write_all(b"lost?").unwrap();
    assert_eq!(read_some(&mut conn, 1, Duration::from_millis(400)), None, "nothing crosses while partitioned");

    rt.block_on(inputs::apply(&mut s, &External::PartitionHeal { relay: "to-peer".into() })).unwrap();
    assert_eq!(
        read_some(&mut conn, 5, Duration::from_secs(2)).as_deref(),
        Some(&b"lost?"[..]),
        "healing delivers what waited"
    );

    let e = rt.block_on(inputs::apply(&mut s, &External::Partition { relay: "nope".into() })).unwrap_err().to_string();
    assert!(e.contains("no relay named \"nope\"") && e.contains("to-peer"), "{e}");
    drop(s);
}
