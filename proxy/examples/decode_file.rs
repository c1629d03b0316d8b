//! Decode throughput on a file of OpenFlow messages back to back: framing
//! and the full typed decode, repeated for a few seconds, as MB/s on one
//! core. For setting sts beside another decoder on the very same bytes
//! (`scripts/bench-codec-peers`).
//!
//!     cargo run --release -p sts-proxy --example decode_file -- FILE [SECONDS]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use sts_proxy::wire::OfpCodec;
use tokio_util::codec::Decoder;

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: decode_file FILE [SECONDS]");
        std::process::exit(2);
    };
    let secs: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(5);
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("decode_file: {path}: {e}");
            std::process::exit(2);
        }
    };
    let once = || {
        let mut buf = BytesMut::from(&data[..]);
        let mut messages = 0usize;
        while let Ok(Some(frame)) = OfpCodec.decode(&mut buf) {
            if frame.decode().is_ok() {
                messages += 1;
            }
        }
        messages
    };
    let messages = once();
    let (start, mut runs) = (Instant::now(), 0u64);
    while start.elapsed() < Duration::from_secs(secs) {
        std::hint::black_box(once());
        runs += 1;
    }
    let mbs = runs as f64 * data.len() as f64 / start.elapsed().as_secs_f64() / 1e6;
    println!("{mbs:.1} MB/s ({messages} messages, {} bytes, {runs} passes)", data.len());
}
