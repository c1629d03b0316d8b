//! Hostile files, the CI-sized part (the long run is `scripts/hostile`,
//! `docs/reliability.md`): a real fuzz run's trace and config, mutated a few
//! hundred ways from a fixed seed (cut, bytes flipped, lines dropped,
//! doubled, swapped, numbers made huge or negative, garbage and invalid
//! UTF-8 inserted), are loaded as `sts replay` loads them. None may panic;
//! every refusal is bad input naming the file; some mutants still load, and
//! a few of those are replayed for real (no hang, no panic). Then: replays
//! leak neither descriptors nor threads.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_engine::config::Config;
use sts_engine::{fuzz, replay, RunError};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A real experiment: ovs-testcontroller on a mesh, fuzzed until its loop.
fn fuzzed_experiment(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-e2e-hostile-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = workspace().join("examples/fuzz-ovs-mesh.toml");
    let config = Config::load(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let exp = fuzz::create_experiment(&config, &text, &dir).unwrap();
    let found = rt().block_on(fuzz::run(sts_e2e::engine(), &config, &exp)).unwrap();
    assert!(found.violation.is_some(), "the mesh's loop is found");
    dir
}

/// One seeded mutation of `text`.
fn mutate(text: &[u8], rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut bytes = text.to_vec();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let join = |ls: Vec<&[u8]>| ls.join(&b'\n');
    match rng.gen_range(0..10) {
        0 => bytes.truncate(rng.gen_range(0..=bytes.len())),
        1 => {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..bytes.len().max(1));
                if let Some(b) = bytes.get_mut(i) {
                    *b ^= 1 << rng.gen_range(0..8);
                }
            }
        }
        2 => {
            let mut ls = lines;
            let i = rng.gen_range(0..ls.len());
            ls.remove(i);
            bytes = join(ls);
        }
        3 => {
            let mut ls = lines;
            let i = rng.gen_range(0..ls.len());
            ls.insert(i, ls[i]);
            bytes = join(ls);
        }
        4 => {
            let mut ls = lines;
            let (i, j) = (rng.gen_range(0..ls.len()), rng.gen_range(0..ls.len()));
            ls.swap(i, j);
            bytes = join(ls);
        }
        5 | 6 => {
            // A number made extreme: huge, negative, fractional, or exponent.
            let digits: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i].is_ascii_digit()).collect();
            if let Some(&at) = digits.get(rng.gen_range(0..digits.len().max(1))) {
                let end = (at..bytes.len()).find(|&i| !bytes[i].is_ascii_digit()).unwrap_or(bytes.len());
                let by: &[u8] =
                    [&b"18446744073709551616"[..], b"-1", b"0", b"1.5", b"1e308", b"4294967295"][rng.gen_range(0..6)];
                bytes.splice(at..end, by.iter().copied());
            }
        }
        7 => {
            let garbage: &[u8] = [
                &b"{}"[..],
                b"[]",
                b"null",
                b"{\"seq\":1}",
                b"\xff\xfe\x00garbage",
                b"[[controllers]]",
                b"= = =",
                b"{\"seq\":99,\"t_ms\":1,\"external\":{\"type\":\"link_down\",\"a\":{\"switch\":99,\"port\":1}}}",
            ][rng.gen_range(0..8)];
            let mut ls = lines;
            let i = rng.gen_range(0..=ls.len());
            ls.insert(i, garbage);
            bytes = join(ls);
        }
        8 => {
            // A string value emptied or made very long.
            if let Some(at) = (0..bytes.len()).filter(|&i| bytes[i] == b'"').nth(rng.gen_range(0..40)) {
                let long = vec![b'x'; rng.gen_range(0..100_000)];
                bytes.splice(at + 1..at + 1, long);
            }
        }
        _ => {
            let at = rng.gen_range(0..=bytes.len());
            bytes.splice(at..at, [0u8, 0xc3, 0x28]);
        }
    }
    bytes
}

/// What loading a mutant did.
#[derive(Debug, Default)]
struct Tally {
    loaded: Vec<PathBuf>,
    refused: usize,
}

/// Loads `mutants` mutations of the experiment's `file` (the other file
/// intact) as `sts replay` would: no panic, every refusal bad input naming
/// the file.
fn load_mutants(exp: &Path, file: &str, mutants: u64, seed: u64) -> Tally {
    let original = std::fs::read(exp.join(file)).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tally = Tally::default();
    for n in 0..mutants {
        let dir = exp.with_extension(format!("{file}-{n}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["config.toml", "trace.jsonl"] {
            std::fs::copy(exp.join(f), dir.join(f)).unwrap();
        }
        std::fs::write(dir.join(file), mutate(&original, &mut rng)).unwrap();
        let loaded = std::panic::catch_unwind(AssertUnwindSafe(|| replay::load(&dir, None)))
            .unwrap_or_else(|_| panic!("mutant {n} of {file} panicked: {}", dir.display()));
        match loaded {
            Ok(_) => tally.loaded.push(dir),
            Err(RunError::BadInput(m)) => {
                assert!(m.contains(file), "mutant {n}: the error names {file}: {m}");
                tally.refused += 1;
            }
            Err(RunError::Config(e)) => {
                assert!(e.to_string().contains(file), "mutant {n}: the error names {file}: {e}");
                tally.refused += 1;
            }
            Err(e) => panic!("mutant {n} of {file}: not bad input: {e}"),
        }
    }
    tally
}

#[test]
fn mutated_traces_and_configs_are_refused_clearly_or_replayed() {
    let exp = fuzzed_experiment("mutants");
    let traces = load_mutants(&exp, "trace.jsonl", 250, 1);
    let configs = load_mutants(&exp, "config.toml", 150, 2);
    eprintln!(
        "traces: {} refused, {} loaded; configs: {} refused, {} loaded",
        traces.refused,
        traces.loaded.len(),
        configs.refused,
        configs.loaded.len()
    );
    assert!(traces.refused > 50 && configs.refused > 30, "the mutations break things");
    // Some still load (a dropped internal event, a changed number): replay
    // a few for real, each bounded in time.
    let rt = rt();
    for dir in traces.loaded.iter().chain(&configs.loaded).step_by(17).take(6) {
        let run = async {
            let (exp, config, trace) = replay::load(dir, None)?;
            replay::replay_once(sts_e2e::engine(), &config, &trace, &exp.replay(1), 1).await
        };
        match rt.block_on(async { tokio::time::timeout(Duration::from_secs(120), run).await }) {
            Ok(Ok(_)) | Ok(Err(RunError::BadInput(_) | RunError::Environment(_))) => {}
            Ok(Err(e)) => panic!("{}: {e}", dir.display()),
            Err(_) => panic!("{}: the replay hung", dir.display()),
        }
    }
}

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Replays in one process leave no descriptors or threads behind: after a
/// first replay (which parks the zygotes), three more change neither count.
#[test]
fn replays_leak_no_descriptors_or_threads() {
    let exp = fuzzed_experiment("leaks");
    let (e, config, trace) = replay::load(&exp, None).unwrap();
    let rt = rt();
    let replay = |n: u32| {
        rt.block_on(replay::replay_once(sts_e2e::engine(), &config, &trace, &e.replay(n), n)).unwrap();
    };
    replay(1);
    let (fds, threads) = (count("/proc/self/fd"), count("/proc/self/task"));
    for n in 2..=4 {
        replay(n);
    }
    let (fds_after, threads_after) = (count("/proc/self/fd"), count("/proc/self/task"));
    // Other tests of this binary run at once: allow what one of them holds.
    assert!(fds_after <= fds + 8, "descriptors: {fds} after one replay, {fds_after} after four");
    assert!(threads_after <= threads + 4, "threads: {threads} after one replay, {threads_after} after four");
}
