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

/// Runs `sts verify DIR`: an experiment directory (a trace), a directory of
/// `dump-flows` listings (`s<DPID>.flows`), or a data set of rule updates.
pub fn run(dir: &Path, limit: Option<usize>, as_json: bool, times: Option<&Path>, config: Option<&Path>) -> u8 {
    let dumps = sts_report::dump_flows::dumps_in(dir);
    let kind = if dir.join("trace.jsonl").is_file() {
        Some("an experiment (a trace)")
    } else if !dumps.is_empty() {
        Some("a directory of dump-flows listings")
    } else {
        None
    };
    if let Some(kind) = kind {
        let flag = if limit.is_some() { Some("--limit") } else { times.map(|_| "--times") };
        if let Some(flag) = flag {
            eprintln!("sts verify: {flag} is about a data set's updates; {} is {kind}", dir.display());
            return exit::BAD_INPUT;
        }
    }
    if config.is_some() && dumps.is_empty() {
        eprintln!(
            "sts verify: --config is for a directory of dump-flows listings (s<DPID>.flows); {} has none",
            dir.display()
        );
        return exit::BAD_INPUT;
    }
    if dir.join("trace.jsonl").is_file() {
        return experiment(dir, as_json);
    }
    if !dumps.is_empty() {
        return testbed_tables(dir, &dumps, config, as_json);
    }
    data_set(dir, limit, as_json, times)
}

/// `sts verify DIR` on a testbed's `dump-flows` listings: each bridge's
/// tables installed on the config's network, checked with its invariants.
fn testbed_tables(
    dir: &Path,
    dumps: &std::collections::BTreeMap<u64, std::path::PathBuf>,
    config: Option<&Path>,
    as_json: bool,
) -> u8 {
    let config_path = config.map_or_else(|| dir.join("config.toml"), Path::to_path_buf);
    let config = match sts_engine::config::Config::load(&config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sts verify: {e} (the config whose network the bridges form: --config FILE)");
            return exit::BAD_INPUT;
        }
    };
    let mut net = sts_mocknet::Network::new(&config.topology(), sts_proxy::wire::OFP13);
    let flows_per_switch: std::collections::BTreeMap<u64, usize> =
        match sts_report::dump_flows::install_dir(dir, &mut net) {
            Ok(installed) => {
                sts_report::dump_flows::judge_as(&mut net, config.network.openflow.wire());
                installed.into_iter().map(|(d, i)| (d, i.flows)).collect()
            }
            Err(e) => {
                eprintln!("sts verify: {e}");
                return exit::BAD_INPUT;
            }
        };
    let missing: Vec<u64> = net.switches.keys().copied().filter(|d| !dumps.contains_key(d)).collect();
    let report = config.checker().check(&net, &sts_invariants::check::Facts::default());
    if as_json {
        let doc = json!({
            "dir": dir.display().to_string(),
            "config": config_path.display().to_string(),
            "flows": flows_per_switch.iter().map(|(d, n)| (format!("s{d}"), *n)).collect::<std::collections::BTreeMap<_, _>>(),
            "without_dump": missing.iter().map(|d| format!("s{d}")).collect::<Vec<_>>(),
            "violations": report.violations.iter().map(|v| json!({
                "invariant": v.invariant.name(), "elements": v.elements, "summary": v.summary, "culprit": v.culprit,
                "witness": v.witness,
            })).collect::<Vec<_>>(),
        });
        outln!("{doc}");
    } else {
        let counts: Vec<String> = flows_per_switch.iter().map(|(d, n)| format!("s{d} {n}")).collect();
        let mut text = format!(
            "{}: the tables of {} bridges (flows: {}) on the network of {}\n",
            dir.display(),
            flows_per_switch.len(),
            counts.join(", "),
            config_path.display()
        );
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|d| format!("s{d}")).collect();
            text.push_str(&format!("  no dump for {}: taken as empty tables\n", names.join(", ")));
        }
        for v in &report.violations {
            text.push_str(&format!("  {}: {}\n", v.invariant.name(), v.summary));
            if let Some(c) = &v.culprit {
                text.push_str(&format!("    culprit: {c}\n"));
            }
            if let Some(w) = &v.witness {
                for hop in &w.path {
                    text.push_str(&format!("    {hop}\n"));
                }
                text.push_str(&format!("    {}\n", w.end));
            }
        }
        if report.violations.is_empty() {
            text.push_str("  no violation in these tables\n");
        }
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    }
    exit::found(!report.violations.is_empty())
}

/// Writes every update's times as CSV.
fn write_times(
    file: std::fs::File,
    rn: &RouterNet,
    times: &[(std::time::Duration, std::time::Duration)],
) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::BufWriter::new(file);
    writeln!(out, "update,line,apply_us,check_us,rule")?;
    for (i, (apply, check)) in times.iter().enumerate() {
        let u = &rn.updates[i];
        let rule = u.to_string().replace('"', "'");
        writeln!(
            out,
            "{},{},{:.1},{:.1},\"{rule}\"",
            i + 1,
            u.line,
            apply.as_secs_f64() * 1e6,
            check.as_secs_f64() * 1e6
        )?;
    }
    out.flush()
}

/// `sts verify DIR` on an experiment: the network at the trace's violation
/// (links and hosts as the inputs left them, tables as the controllers'
/// messages made them) checked again, beside the run's own verdict.
fn experiment(dir: &Path, as_json: bool) -> u8 {
    let Some(config) = sts_report::topology::config(dir) else {
        eprintln!("sts verify: {}: no readable config.toml for this experiment", dir.display());
        return exit::BAD_INPUT;
    };
    let trace = match sts_trace::Trace::load(&dir.join("trace.jsonl")) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("sts verify: {e}");
            return exit::BAD_INPUT;
        }
    };
    let own = match sts_engine::records::first_violation(&trace) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("sts verify: {}: {e}", dir.join("trace.jsonl").display());
            return exit::BAD_INPUT;
        }
    };
    let Some((at, net, down)) = sts_report::tables::network_at_violation(&config, &trace) else {
        outln!("{}: the trace records no violation: nothing to check against", dir.display());
        return exit::OK;
    };
    let report = config.checker().check(&net, &sts_invariants::check::Facts::default());
    let own = own.expect("a trace with a violation record");
    // A storm the dataplane saw has no table state to find it in.
    let observed = own.is_observed_loop() || own.is_event();
    let agrees = report.violations.iter().any(|v| v.fingerprint() == own.fingerprint());
    if as_json {
        let doc = json!({
            "dir": dir.display().to_string(),
            "at_ms": at,
            "failed_switches": down,
            "rules": report.rules,
            "violations": report.violations.iter().map(|v| json!({
                "invariant": v.invariant.name(), "elements": v.elements, "summary": v.summary, "culprit": v.culprit,
            })).collect::<Vec<_>>(),
            "run": json!({"invariant": own.invariant.name(), "summary": own.summary, "seen_by_the_dataplane": observed}),
            "agrees": agrees,
        });
        outln!("{doc}");
    } else {
        let mut text = format!(
            "{}: the network at the violation ({at} ms; {} rules rebuilt from the trace's messages{}):\n",
            dir.display(),
            report.rules,
            if down.is_empty() { String::new() } else { format!("; failed switches {down:?}") }
        );
        for v in &report.violations {
            text.push_str(&format!("  {}\n", v.summary));
        }
        if report.violations.is_empty() {
            text.push_str("  no violation in its tables\n");
        }
        let verdict = if agrees {
            "found again in the tables"
        } else if observed {
            "seen by the dataplane as it happened (a storm or a log line), which no table shows"
        } else {
            "NOT found in the tables"
        };
        text.push_str(&format!("the run's own verdict: {}: {verdict}\n", own.summary));
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    }
    exit::found(!report.violations.is_empty())
}

/// What `sts verify` checks on a data set: loops (its routers are its only hosts).
fn loop_checker() -> Checker {
    Checker { enabled: [Invariant::Loop].into_iter().collect(), ..Checker::default() }
}

/// `sts verify DIR` on a data set in the Stanford backbone's format.
fn data_set(dir: &Path, limit: Option<usize>, as_json: bool, times: Option<&Path>) -> u8 {
    let mut rn = match RouterNet::load(dir) {
        Ok(rn) => rn,
        Err(e) => {
            eprintln!("sts verify: {e}");
            return exit::BAD_INPUT;
        }
    };
    // Made before the run, so that a path that cannot be written fails at once.
    let times_file = match times.map(|p| (p, std::fs::File::create(p))) {
        None => None,
        Some((_, Ok(f))) => Some(f),
        Some((p, Err(e))) => {
            eprintln!("sts verify: {}: {e}", p.display());
            return exit::ENVIRONMENT;
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
    let outcome = verify::run(&mut rn, loop_checker(), limit, |i| {
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
    if let (Some(file), Some(path)) = (times_file, times) {
        if let Err(e) = write_times(file, &rn, &out.times) {
            eprintln!("sts verify: {}: {e}", path.display());
            return exit::ENVIRONMENT;
        }
    }
    // A full check from scratch of the largest snapshot, on the side.
    let peak_check = RouterNet::load(dir)
        .map_err(|e| e.to_string())
        .and_then(|mut again| verify::full_check_at(&mut again, loop_checker(), out.peak.0 + 1));
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
            let turns_back = v.witness.as_ref().map(|w| rn.turns_back(&w.path)).unwrap_or_default();
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
                "turns_back": turns_back.iter().map(|(r, i)| json!({"router": r, "interface": i})).collect::<Vec<_>>(),
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
            "largest_snapshot": peak_check.as_ref().ok().map(|(d, r)| json!({
                "after_update": out.peak.0 + 1, "rules": out.peak.1, "full_check_ms": d.as_secs_f64() * 1e3,
                "violations": r.violations.len(),
            })),
            "per_source_because": out.last.per_source_because,
            "peak_memory_mib": memory,
        });
        outln!("{doc}");
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
            if let Some(turns) = a["turns_back"].as_array().filter(|t| !t.is_empty()) {
                let at: Vec<String> = turns
                    .iter()
                    .map(|t| {
                        format!("{} {}", t["router"].as_str().unwrap_or(""), t["interface"].as_str().unwrap_or(""))
                    })
                    .collect();
                say!("    turns back at {} (out of the interface it came in on)", at.join(", "));
            }
        }
        say!(
            "{} violations appeared; {} of {} updates left some violation in place",
            appeared.len(),
            out.violated_after,
            out.times.len()
        );
        let turning = appeared.iter().filter(|a| a["turns_back"].as_array().is_some_and(|t| !t.is_empty())).count();
        if turning > 0 {
            say!(
                "  {turning} of them turn back out of an interface they came in on at some router \
                 (a real router does; APKeep's model does not, so it cannot report those)"
            );
        }
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
        match &peak_check {
            Ok((d, r)) => say!(
                "full check from scratch of the largest snapshot (after update {}, {} rules): {:.1} ms, {} loops",
                out.peak.0 + 1,
                out.peak.1,
                d.as_secs_f64() * 1e3,
                r.violations.len()
            ),
            Err(e) => say!("full check of the largest snapshot: not run ({e})"),
        }
        if let Some(m) = memory {
            say!("peak memory {m:.0} MiB");
        }
        // A closed pipe (`| head`) ends the output quietly.
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    }
    exit::found(!appeared.is_empty())
}
