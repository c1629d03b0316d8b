//! What the interposition proxy costs, measured side by side with a direct
//! connection on loopback.
//!
//! A synthetic "controller" (the sink) answers ECHO_REQUEST with ECHO_REPLY and
//! counts every other message. The sender talks to it directly, then through
//! the standalone proxy (`sts_engine::standalone`, recording every message to a file,
//! on its own single-threaded runtime: one core).
//!
//! - latency: 20,000 sequential echo round trips; the proxy is crossed twice per
//!   round trip, so the added latency per message is half the difference;
//! - throughput: 300,000 PACKET_INs (98-byte frames) sent as fast as possible;
//!   messages per second until the sink has counted them all;
//! - recording: the recorder thread (JSON Lines, the bytes in hex) trails the relay;
//!   its rate is measured from the burst's start until it has written everything.
//!
//! With `--peers`, the same measures through socat and haproxy (tcp mode),
//! relaying the same streams to the same sink (Debian's packages, installed
//! by scripts/setup): what a user would otherwise put in the path.
//!
//! Run: `cargo run --release -p sts-engine --example proxy_bench [-- --peers]`.
//! Results: docs/benchmarks.md.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use sts_proxy::wire::v13::{self, BasicOxm, Field};
use sts_proxy::wire::{Body, Message, OfpCodec};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;

const ROUND_TRIPS: usize = 20_000;
const BURST: u64 = 300_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Starts the sink on its own thread; returns its address and its counter.
fn sink() -> (SocketAddr, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let c = count.clone();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            loop {
                let (s, _) = l.accept().await.unwrap();
                s.set_nodelay(true).unwrap();
                let c = c.clone();
                tokio::spawn(async move {
                    let (r, mut w) = s.into_split();
                    let mut frames = FramedRead::new(r, OfpCodec);
                    while let Some(Ok(f)) = frames.next().await {
                        let h = f.header();
                        if h.msg_type == v13::types::ECHO_REQUEST {
                            let reply = [h.version, v13::types::ECHO_REPLY, 0, 8, 0, 0, 0, 0];
                            let mut reply = reply.to_vec();
                            reply[4..8].copy_from_slice(&h.xid.to_be_bytes());
                            if w.write_all(&reply).await.is_err() {
                                return;
                            }
                        } else {
                            c.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
    });
    (rx.recv().unwrap(), count)
}

/// Starts the standalone proxy on its own thread in front of `target`.
fn proxy(target: SocketAddr, rec: Option<sts_proxy::standalone::Recording>) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let (rtx, rrx) = tokio::sync::oneshot::channel();
            let task = tokio::spawn(async move {
                sts_proxy::standalone::run(
                    "127.0.0.1:0".parse().unwrap(),
                    target,
                    rec,
                    Vec::new(),
                    64,
                    sts_engine::clock::Clock::start().now_fn(),
                    Some(rtx),
                )
                .await
            });
            tx.send(rrx.await.unwrap()).unwrap();
            let _ = task.await;
        });
    });
    rx.recv().unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latencies(addr: SocketAddr) -> Vec<Duration> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut out = Vec::with_capacity(ROUND_TRIPS);
    let mut buf = [0u8; 8];
    for i in 0..ROUND_TRIPS as u32 {
        let mut req = vec![4u8, v13::types::ECHO_REQUEST, 0, 8];
        req.extend_from_slice(&i.to_be_bytes());
        let t = Instant::now();
        s.write_all(&req).await.unwrap();
        s.read_exact(&mut buf).await.unwrap();
        out.push(t.elapsed());
    }
    out.sort();
    out
}

async fn throughput(addr: SocketAddr, count: &AtomicU64) -> f64 {
    let frame = Message::new(
        1,
        Body::V13(v13::Msg::PacketIn(v13::PacketIn {
            buffer_id: v13::NO_BUFFER,
            total_len: 98,
            reason: 0,
            table_id: 0,
            cookie: 0,
            r#match: v13::Match::new([BasicOxm::exact(Field::InPort, 1)]),
            data: Bytes::from(vec![0x42; 98]),
        })),
    )
    .emit()
    .unwrap();
    let s = TcpStream::connect(addr).await.unwrap();
    let start_count = count.load(Ordering::Relaxed);
    let t = Instant::now();
    let mut w = BufWriter::with_capacity(1 << 16, s);
    for _ in 0..BURST {
        w.write_all(&frame).await.unwrap();
    }
    w.flush().await.unwrap();
    while count.load(Ordering::Relaxed) - start_count < BURST {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    BURST as f64 / t.elapsed().as_secs_f64()
}

/// A relay of someone else's from a free port to `to`: the child and the address.
fn peer(name: &str, to: SocketAddr, dir: &std::path::Path) -> (std::process::Child, SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cmd = match name {
        "socat" => {
            let mut c = std::process::Command::new("socat");
            c.arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay")).arg(format!("TCP:{to},nodelay"));
            c
        }
        _ => {
            let cfg = dir.join("haproxy.cfg");
            std::fs::write(
                &cfg,
                format!(
                    "global\n  nbthread 1\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  \
                     timeout server 1h\nlisten relay\n  bind 127.0.0.1:{port}\n  option tcp-smart-connect\n  \
                     server sink {to}\n"
                ),
            )
            .unwrap();
            let mut c = std::process::Command::new("haproxy");
            c.arg("-db").arg("-f").arg(&cfg);
            c
        }
    };
    let child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{name} (scripts/setup installs it): {e}"));
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{name} does not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr)
}

fn main() {
    if std::env::args().any(|a| a == "--peers") {
        return peers();
    }
    let (sink_addr, count) = sink();
    let record = std::env::temp_dir().join(format!("sts-proxy-bench-{}.jsonl", std::process::id()));
    let (rec, _recorder) = sts_proxy::standalone::record_to(&record).unwrap();
    let proxy_addr = proxy(sink_addr, Some(rec.clone()));
    let bare_proxy_addr = proxy(sink_addr, None);
    let rt = runtime();
    rt.block_on(async {
        // Warm up both paths.
        latencies(sink_addr).await;
        latencies(proxy_addr).await;
        let direct = latencies(sink_addr).await;
        let proxied = latencies(proxy_addr).await;
        let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
        let (p50, p99) = (percentile(&proxied, 0.5), percentile(&proxied, 0.99));
        println!(
            "echo round trip, direct:  median {:>7.1} µs, p99 {:>7.1} µs",
            d50.as_secs_f64() * 1e6,
            d99.as_secs_f64() * 1e6
        );
        println!(
            "echo round trip, proxied: median {:>7.1} µs, p99 {:>7.1} µs",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
        println!(
            "added per message (half the round-trip difference): median {:.1} µs, p99 {:.1} µs",
            (p50.as_secs_f64() - d50.as_secs_f64()) * 1e6 / 2.0,
            (p99.as_secs_f64() - d99.as_secs_f64()) * 1e6 / 2.0
        );
        let direct = throughput(sink_addr, &count).await;
        let bare = throughput(bare_proxy_addr, &count).await;
        // Let the recorder finish the latency runs' events first.
        while rec.written() < 4 * ROUND_TRIPS as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let start = Instant::now();
        let proxied = throughput(proxy_addr, &count).await;
        println!("PACKET_IN throughput, direct:  {direct:>10.0} messages/s");
        println!("PACKET_IN throughput, proxied without recording: {bare:>10.0} messages/s");
        println!(
            "PACKET_IN throughput, proxied and recording:     {proxied:>10.0} messages/s over a {BURST}-message burst"
        );
        let total = 4 * ROUND_TRIPS as u64 + BURST;
        while rec.written() < total {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        println!(
            "recorder: {:>10.0} messages/s written (trails the relay)",
            BURST as f64 / start.elapsed().as_secs_f64()
        );
    });
    let _ = std::fs::remove_file(record);
}

/// sts's proxy (recording and not) beside socat and haproxy in one run: echo
/// round trips and a PACKET_IN burst through each, to the same sink.
fn peers() {
    let (sink_addr, count) = sink();
    let dir = std::env::temp_dir().join(format!("sts-proxy-peers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("recording.jsonl");
    let (rec, _recorder) = sts_proxy::standalone::record_to(&record).unwrap();
    let recording = proxy(sink_addr, Some(rec));
    let bare = proxy(sink_addr, None);
    let (mut socat, socat_addr) = peer("socat", sink_addr, &dir);
    let (mut haproxy, haproxy_addr) = peer("haproxy", sink_addr, &dir);
    let rt = runtime();
    rt.block_on(async {
        latencies(sink_addr).await;
        let direct = latencies(sink_addr).await;
        let d50 = percentile(&direct, 0.5).as_secs_f64() * 1e6;
        println!("| relay | echo round trip, median | added per message, median | p99 round trip | PACKET_IN relay, 300,000 burst |");
        println!("|---|---|---|---|---|");
        let direct_rate = throughput(sink_addr, &count).await;
        println!(
            "| none (direct) | {d50:.1} µs | | {:.1} µs | {direct_rate:.0} msgs/s |",
            percentile(&direct, 0.99).as_secs_f64() * 1e6
        );
        for (name, addr) in [
            ("sts proxy, not recording", bare),
            ("sts proxy, recording", recording),
            ("socat", socat_addr),
            ("haproxy (tcp mode, one thread)", haproxy_addr),
        ] {
            latencies(addr).await; // warm up
            let l = latencies(addr).await;
            let (p50, p99) = (percentile(&l, 0.5).as_secs_f64() * 1e6, percentile(&l, 0.99).as_secs_f64() * 1e6);
            let rate = throughput(addr, &count).await;
            println!("| {name} | {p50:.1} µs | {:.1} µs | {p99:.1} µs | {rate:.0} msgs/s |", (p50 - d50) / 2.0);
        }
    });
    let _ = (socat.kill(), haproxy.kill(), socat.wait(), haproxy.wait());
    let _ = std::fs::remove_dir_all(dir);
}
