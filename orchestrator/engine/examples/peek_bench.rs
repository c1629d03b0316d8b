//! PEEK with checkpoints against PEEK by prefix replay, side by side on the
//! same experiments: wall time of each, and whether they inferred the same
//! internal events after every input.
//!
//! ```sh
//! cargo build --release -p sts-shim
//! cargo run --release -p sts --example peek_bench -- DIR...
//! ```
//!
//! Each DIR is an experiment directory (`config.toml`, `trace.jsonl`), e.g.
//! one written by `tests/suite/make_trace.py CASE EXTRA SEED DIR`. Prints one
//! Markdown row per experiment; exits non-zero if the methods disagree.
//! Results: docs/benchmarks.md.

use std::path::PathBuf;
use std::time::Instant;

use sts_engine::config::Config;
use sts_engine::peek;
use sts_trace::Trace;

/// Says why the benchmark cannot go on, and exits with 2 (bad input).
fn fail(why: &str) -> ! {
    eprintln!("peek_bench: {why}");
    std::process::exit(2);
}

fn main() {
    let dirs: Vec<PathBuf> = std::env::args().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        eprintln!("usage: peek_bench DIR... (experiment directories with config.toml and trace.jsonl)");
        std::process::exit(2);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let engine = sts_engine::Engine::silent();
    let mut all_agree = true;
    println!(
        "| experiment | inputs | prefix replay | runs | checkpoints | rollbacks (retries) | quiet, skipped | speed-up | same events |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for dir in dirs {
        let config =
            Config::load(&dir.join("config.toml")).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
        let trace = Trace::load(&dir.join("trace.jsonl")).unwrap_or_else(|e| fail(&e.to_string()));
        let out = std::env::temp_dir().join(format!("sts-peek-bench-{}", std::process::id()));
        let t = Instant::now();
        let prefix = rt
            .block_on(peek::by_prefix(&engine, &config, &trace, &out))
            .unwrap_or_else(|e| fail(&format!("{}: prefix replay: {e}", dir.display())));
        let prefix_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let cps = rt
            .block_on(peek::by_checkpoints(&engine, &config, &trace, &out))
            .unwrap_or_else(|e| fail(&format!("{}: checkpoints: {e}", dir.display())));
        let cps_s = t.elapsed().as_secs_f64();
        let (a, b) = (prefix.windows(), cps.windows());
        let differ: Vec<usize> = (0..a.len().max(b.len())).filter(|&i| a.get(i) != b.get(i)).collect();
        all_agree &= differ.is_empty();
        for &i in &differ {
            let (x, y) = (a.get(i).cloned().unwrap_or_default(), b.get(i).cloned().unwrap_or_default());
            let only = |p: &[String], q: &[String]| {
                p.iter().filter(|k| !q.contains(k)).map(|k| k.chars().take(120).collect::<String>()).collect::<Vec<_>>()
            };
            eprintln!(
                "{}: window {i}: only by prefix replay: {:?}; only with checkpoints: {:?}",
                dir.display(),
                only(&x, &y),
                only(&y, &x)
            );
        }
        let same = if differ.is_empty() { "yes".to_string() } else { format!("no: windows {differ:?}") };
        let name = dir.file_name().map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        println!(
            "| {name} | {} | {prefix_s:.2} s | {} | {cps_s:.2} s | {} ({}) | {} | {:.1}x | {same} |",
            trace.externals().len(),
            prefix.runs,
            cps.rollbacks,
            cps.busy,
            cps.skipped,
            prefix_s / cps_s
        );
        let _ = std::fs::remove_dir_all(&out);
    }
    if !all_agree {
        std::process::exit(1);
    }
}
