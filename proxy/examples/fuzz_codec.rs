//! A long hostile-input run of the codec: `scripts/fuzz-codec` (default one
//! million inputs). Seeded, so a failure is repeatable from its seed and index.
//!
//! Inputs come from four generators, in turn:
//! - random bytes as a whole frame;
//! - a valid header (random version and type) over a random body;
//! - a valid generated message, then mutated (bytes flipped, inserted, removed,
//!   truncated) with its length field fixed up so parsing reaches the damage;
//! - a random byte stream through the tokio framing decoder.
//!
//! For each input it checks: no panic; decoding ends in a message or a typed
//! error; a decoded message re-encodes; the peak heap used while decoding stays
//! within a fixed multiple of the frame length (never driven by a claimed length).
//! Exits 1 and writes the offending input to a file if any check fails.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use arbitrary::{Arbitrary, Unstructured};
use bytes::{Bytes, BytesMut};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_proxy::wire::{Message, OfpCodec};
use tokio_util::codec::Decoder;

use common::alloc_meter::{bytes_allocated_by, AllocMeter};

#[global_allocator]
static METER: AllocMeter = AllocMeter;

const MAX_BYTES_PER_FRAME_BYTE: usize = 16;
const FIXED_ALLOWANCE: usize = 4096;

struct Stats {
    decoded: u64,
    errors: std::collections::BTreeMap<String, u64>,
    max_ratio: f64,
    max_peak: usize,
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn mutate(rng: &mut ChaCha8Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.gen_range(1..=4) {
        if b.len() <= 8 {
            break;
        }
        match rng.gen_range(0..4) {
            0 => {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            1 => {
                let i = rng.gen_range(8..=b.len());
                b.insert(i, rng.gen());
            }
            2 => {
                let i = rng.gen_range(8..b.len());
                b.remove(i);
            }
            _ => {
                let n = rng.gen_range(8..=b.len());
                b.truncate(n);
            }
        }
    }
    // Keep the header length consistent most of the time so the body parser runs.
    if b.len() >= 4 && rng.gen_ratio(7, 8) {
        let len = (b.len().min(0xffff)) as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
    }
    b
}

fn check_frame(frame: &[u8], stats: &mut Stats) -> Result<(), String> {
    let bytes = Bytes::copy_from_slice(frame);
    let (result, peak) = bytes_allocated_by(|| Message::parse(bytes.clone()).map(|m| m.emit()));
    match result {
        Ok(Ok(_)) => stats.decoded += 1,
        Ok(Err(e)) => return Err(format!("decoded but could not re-encode: {e}")),
        Err(e) => {
            let kind = format!("{e:?}");
            let kind = kind.split([' ', '(', '{']).next().unwrap_or("?").to_string();
            *stats.errors.entry(kind).or_default() += 1;
        }
    }
    let limit = MAX_BYTES_PER_FRAME_BYTE * frame.len() + FIXED_ALLOWANCE;
    if peak > limit {
        return Err(format!("peak heap {peak} bytes for a {}-byte frame (limit {limit})", frame.len()));
    }
    stats.max_peak = stats.max_peak.max(peak);
    if frame.len() >= 64 {
        stats.max_ratio = stats.max_ratio.max(peak as f64 / frame.len() as f64);
    }
    Ok(())
}

fn main() {
    let inputs = arg("--inputs", 1_000_000);
    let seed = arg("--seed", 1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut stats = Stats { decoded: 0, errors: Default::default(), max_ratio: 0.0, max_peak: 0 };
    let start = Instant::now();
    let mut scratch = vec![0u8; 4096];
    for i in 0..inputs {
        let input: Vec<u8> = match i % 4 {
            0 => {
                let n = rng.gen_range(0..512);
                (0..n).map(|_| rng.gen()).collect()
            }
            1 => {
                let n = rng.gen_range(0..1024);
                let mut f = vec![*[1u8, 4, 4, 1, rng.gen()].get(rng.gen_range(0..5)).unwrap(), rng.gen_range(0..32)];
                f.extend_from_slice(&((8 + n) as u16).to_be_bytes());
                f.extend((0..4 + n).map(|_| rng.gen::<u8>()));
                f
            }
            2 => {
                rng.fill_bytes(&mut scratch);
                match Message::arbitrary(&mut Unstructured::new(&scratch)).ok().and_then(|m| m.emit().ok()) {
                    Some(valid) => mutate(&mut rng, valid),
                    None => continue,
                }
            }
            _ => {
                let n = rng.gen_range(0..2048);
                (0..n).map(|_| rng.gen()).collect()
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if i % 4 == 3 {
                // A stream: frame it, then check each frame.
                let mut buf = BytesMut::from(&input[..]);
                let mut codec = OfpCodec;
                let mut steps = 0;
                loop {
                    steps += 1;
                    if steps > input.len() / 8 + 2 {
                        return Err("framing made no progress".to_string());
                    }
                    match codec.decode_eof(&mut buf) {
                        Ok(Some(f)) => check_frame(f.bytes(), &mut stats)?,
                        Ok(None) | Err(_) => return Ok(()),
                    }
                }
            } else {
                check_frame(&input, &mut stats)
            }
        }));
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(msg)) => Some(msg),
            Err(_) => Some("panic".to_string()),
        };
        if let Some(msg) = failure {
            let path = format!("fuzz-codec-failure-seed{seed}-input{i}.bin");
            let _ = std::fs::write(&path, &input);
            eprintln!("FAILED at input {i} (seed {seed}): {msg}; input written to {path}");
            std::process::exit(1);
        }
        if (i + 1) % 200_000 == 0 {
            eprintln!("  {} inputs, {:.1}s", i + 1, start.elapsed().as_secs_f64());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!("fuzz-codec: {inputs} inputs (seed {seed}) in {secs:.1}s, {:.0} inputs/s", inputs as f64 / secs);
    println!("  decoded and re-encoded: {}", stats.decoded);
    for (kind, n) in &stats.errors {
        println!("  typed error {kind}: {n}");
    }
    println!("  peak heap while decoding: max {} bytes; max {:.1} bytes per frame byte (frames >= 64 bytes; limit {MAX_BYTES_PER_FRAME_BYTE})", stats.max_peak, stats.max_ratio);
    println!("  panics: 0, bound violations: 0");
}
