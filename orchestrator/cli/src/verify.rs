//! `sts verify`: a real network's rule updates checked one at a time
//! (`sts_invariants::verify` does the work; this prints it).

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sts_invariants::check::{Checker, Invariant};
use sts_invariants::stanford::RouterNet;
use sts_invariants::verify::{self, Stats};

use crate::exit;

/// The peak resident memory of this process (VmHWM), in MiB, where Linux says it.
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn stats_json(s: &Stats) -> serde_json::Value {
    json!({"mean_us": s.mean, "p50_us": s.p50, "p95_us": s.p95, "p99_us": s.p99, "max_us": s.max, "total_ms": s.total_ms})
}

/// Runs `sts verify DIR`.
pub fn run(dir: &Path, limit: Option<usize>, as_json: bool) -> u8 {
    let mut rn = match RouterNet::load(dir) {
        Ok(rn) => rn,
        Err(e) => {
            eprintln!("sts verify: {e}");
            return exit::BAD_INPUT;
        }
    };
    let total = limit.map_or(rn.updates.len(), |l| l.min(rn.updates.len()));
    let acl_elements = rn.net.switches.len() - rn.routers();
    if !as_json {
        eprintln!(
            "{}: {} routers, {} ACL elements, {} links, {} updates{}",
            dir.display(),
            rn.routers(),
            acl_elements,
            rn.net.switch_links().len(),
            rn.updates.len(),
            if total < rn.updates.len() { format!(" (checking the first {total})") } else { String::new() }
        );
    }
    let bar = if std::io::stderr().is_terminal() && !as_json {
        let b = ProgressBar::new(total as u64);
        b.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} updates {elapsed}").expect("a valid template"));
        Some(b)
    } else {
        None
    };
    let checker = Checker { enabled: [Invariant::Loop].into_iter().collect(), ..Checker::default() };
    let outcome = verify::run(&mut rn, checker, limit, |i| {
        if let Some(b) = &bar {
            if i % 64 == 0 || i == total {
                b.set_position(i as u64);
            }
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let out = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("sts verify: {}: {e}", dir.display());
            return exit::BAD_INPUT;
        }
    };
    let apply = Stats::of(out.times.iter().map(|t| t.0));
    let check = Stats::of(out.times.iter().map(|t| t.1));
    let both = Stats::of(out.times.iter().map(|t| t.0 + t.1));
    let memory = peak_memory_mib();
    let appeared: Vec<serde_json::Value> = out
        .appeared
        .iter()
        .map(|a| {
            let u = &rn.updates[a.update];
            let v = &a.violation;
            json!({
                "update": a.update + 1,
                "line": u.line,
                "rule": u.to_string(),
                "invariant": v.invariant.name(),
                "elements": v.elements.iter().map(|e| rn.rename(e)).collect::<Vec<_>>(),
                "summary": rn.rename(&v.summary),
                "witness": v.witness.as_ref().map(|w| json!({
                    "header": w.header,
                    "from": w.from,
                    "path": w.path.iter().map(|h| rn.rename(h)).collect::<Vec<_>>(),
                    "end": rn.rename(&w.end),
                })),
            })
        })
        .collect();
    if as_json {
        let doc = json!({
            "dir": dir.display().to_string(),
            "routers": rn.routers(),
            "acl_elements": acl_elements,
            "updates": out.times.len(),
            "appeared": appeared,
            "violated_after": out.violated_after,
            "classes": out.last.classes,
            "initial_check_ms": out.initial.as_secs_f64() * 1e3,
            "apply": stats_json(&apply),
            "check": stats_json(&check),
            "per_update": stats_json(&both),
            "full_checks": out.fallbacks,
            "per_source_because": out.last.per_source_because,
            "peak_memory_mib": memory,
        });
        println!("{doc}");
    } else {
        let mut text = String::new();
        macro_rules! say {
            ($($arg:tt)*) => {{
                use std::fmt::Write as _;
                let _ = writeln!(text, $($arg)*);
            }};
        }
        for a in &appeared {
            say!(
                "update {} (line {}) {}\n  {}",
                a["update"],
                a["line"],
                a["rule"].as_str().unwrap_or(""),
                a["summary"].as_str().unwrap_or("")
            );
            if let Some(path) = a["witness"]["path"].as_array() {
                for hop in path {
                    say!("    {}", hop.as_str().unwrap_or(""));
                }
                say!("    {}", a["witness"]["end"].as_str().unwrap_or(""));
            }
        }
        say!(
            "{} violations appeared; {} of {} updates left some violation in place",
            appeared.len(),
            out.violated_after,
            out.times.len()
        );
        let row = |text: &mut String, name: &str, s: &Stats| {
            use std::fmt::Write as _;
            let _ = writeln!(
                text,
                "  {name:<10} mean {:>8.1} µs  p50 {:>8.1}  p95 {:>8.1}  p99 {:>9.1}  max {:>9.1}  total {:>8.1} ms",
                s.mean, s.p50, s.p95, s.p99, s.max, s.total_ms
            );
        };
        say!("time per update ({} header classes):", out.last.classes);
        row(&mut text, "apply", &apply);
        row(&mut text, "re-check", &check);
        row(&mut text, "both", &both);
        if let Some(why) = &out.last.per_source_because {
            say!("  the class engine could not run ({why}): every check walked each source");
        }
        for (why, n) in &out.fallbacks {
            say!("  {n} re-checks were full checks: {why}");
        }
        if let Some(m) = memory {
            say!("peak memory {m:.0} MiB");
        }
        // A closed pipe (`| head`) ends the output quietly.
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    }
    exit::found(!appeared.is_empty())
}
