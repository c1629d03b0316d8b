//! `sts proxy` against hostile peers: many idle connections (more than its
//! descriptors allow) do not end it; SIGTERM ends it cleanly, with a
//! recording made of whole lines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sts_proxy::wire::{v13, Body, Message};

/// A controller that accepts everything and keeps the connections open;
/// returns its address and a counter of connections accepted.
fn sink_controller() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    (addr, count)
}

/// A running `sts proxy`, with the port the kernel gave it and its stderr
/// past the first line.
struct Proxy {
    child: Child,
    port: u16,
    stderr: BufReader<ChildStderr>,
}

/// Starts `sts proxy` on a port the kernel picks (the proxy says which:
/// no other process can take it between asking and binding); `nofile` caps
/// its open-file limit (soft and hard).
fn start_proxy(controller: &str, extra: &[&str], nofile: Option<u64>) -> Proxy {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sts"));
    cmd.args(["proxy", "--listen", "127.0.0.1:0", "--controller", controller])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; nothing else runs in the child before exec.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n)
                    .map_err(std::io::Error::from)
            });
        }
    }
    let mut child = cmd.spawn().expect("start sts proxy");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    // "sts proxy: switches -> 127.0.0.1:PORT -> controller ..."
    let port = first
        .split(" -> ")
        .nth(1)
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("the proxy did not say where it listens: {first:?}"));
    Proxy { child, port, stderr }
}

fn alive(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

fn stop(mut proxy: Proxy, signal: Signal) -> (i32, String) {
    kill(Pid::from_raw(proxy.child.id() as i32), signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(&mut proxy.child) {
        assert!(Instant::now() < deadline, "the proxy did not stop on {signal}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut err = String::new();
    proxy.stderr.read_to_string(&mut err).unwrap();
    (proxy.child.wait().unwrap().code().unwrap_or(-1), err)
}

/// 300 idle connections to a proxy allowed 64 descriptors: it used to exit
/// 3 ("Too many open files"). Now it refuses what it cannot relay, stays up,
/// and relays a switch again once the crowd has gone.
#[test]
fn more_connections_than_descriptors_do_not_end_the_proxy() {
    let (ctl, accepted) = sink_controller();
    let mut proxy = start_proxy(&ctl, &["--max-switches", "4"], Some(96));
    let port = proxy.port;
    let crowd: Vec<TcpStream> = (0..300).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect();
    std::thread::sleep(Duration::from_millis(500));
    assert!(alive(&mut proxy.child), "the proxy survived {} connections", crowd.len());
    let relayed = accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!((1..=4).contains(&relayed), "{relayed} relayed: at most --max-switches");
    drop(crowd);
    std::thread::sleep(Duration::from_millis(500));
    let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
    let _late = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while accepted.load(std::sync::atomic::Ordering::SeqCst) == before {
        assert!(Instant::now() < deadline, "a switch arriving after the crowd left is relayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, err) = stop(proxy, Signal::SIGTERM);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("refused"), "the refusals are reported: {err}");
    // Switches coming and going are said, by default, as they happen.
    assert!(err.contains("connected (channel ") && err.contains(&format!("relayed to {ctl}")), "{err}");
    assert!(err.contains("left (channel "), "{err}");
}

/// SIGTERM (and SIGHUP) end the proxy like Ctrl-C: exit 0, the recording
/// finished, every line whole and parseable.
#[test]
fn sigterm_finishes_the_recording_in_whole_lines() {
    for signal in [Signal::SIGTERM, Signal::SIGHUP] {
        let (ctl, _) = sink_controller();
        let record = std::env::temp_dir().join(format!("sts-proxy-{}-{signal}.jsonl", std::process::id()));
        let _ = std::fs::remove_file(&record);
        let mut proxy = start_proxy(&ctl, &["--record", record.to_str().unwrap()], None);
        let mut switch = TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
        let mut burst = Vec::new();
        for xid in 0..2000 {
            burst.extend(Message::new(xid, Body::V13(v13::Msg::BarrierRequest)).emit().unwrap());
        }
        switch.write_all(&burst).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(alive(&mut proxy.child));
        let (code, err) = stop(proxy, signal);
        assert_eq!(code, 0, "{signal}: {err}");
        assert!(err.contains("messages recorded"), "{signal}: {err}");
        let text = std::fs::read_to_string(&record).unwrap();
        assert!(text.ends_with('\n'), "{signal}: the recording ends with a whole line");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() > 1000, "{signal}: {} lines", lines.len());
        for (i, l) in lines.iter().enumerate() {
            serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{signal}: line {}: {e}", i + 1));
        }
    }
}
