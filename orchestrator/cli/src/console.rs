//! `sts console DIR`: step through a recorded trace with the real
//! controllers, one input at a time, and look at the network between steps.
//!
//! The replay is the engine's [`Replayer`]; this module only reads commands
//! (rustyline on a terminal: history, completion of commands and switch
//! names; plain lines from `--script FILE` or a pipe, echoed after the
//! prompt) and prints what the network looks like. Each session is a replay
//! written to `DIR/console/N/` (its trace and controller logs).

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::Path;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Editor, Helper};
use sts_engine::replay::{self, Replayer, Step};
use sts_engine::{observe, Engine};

use crate::exit;

/// Commands, their arguments and what they do (`help`).
const COMMANDS: &[(&str, &str, &str)] = &[
    ("next", "[N]", "inject the next N inputs (default 1), waiting for what preceded each, as a replay does"),
    ("continue", "", "inject inputs until a breakpoint or the violation (waiting after the last input as a replay does)"),
    ("run-to", "SEQ|violation", "inject inputs until just before the one with trace seq SEQ, or until the violation"),
    ("break", "seq N|event TYPE|invariant [KIND]", "stop `continue` before input seq N, before the next input of TYPE (ping, host_migrate, link_down ...), or once a check finds a violation (of KIND: loop, blackhole ...)"),
    ("breaks", "", "list the breakpoints"),
    ("delete", "N", "delete breakpoint N"),
    ("where", "", "position in the trace, virtual time, the next input"),
    ("nodes", "", "switches, hosts and controllers"),
    ("links", "", "switch-to-switch and host links, up or down"),
    ("flows", "[SWITCH]", "flow tables in ovs-ofctl dump-flows style (every switch, or one: s3)"),
    ("check", "", "run the invariant checker now; print the violations with witness and culprit"),
    ("help", "[COMMAND]", "this list, or one command"),
    ("quit", "", "end the session (Ctrl-D too); the replay's trace stays in DIR/console/N"),
];

/// Where `continue` stops.
#[derive(Debug, Clone, PartialEq)]
enum Break {
    /// Before the input with this trace `seq`.
    Seq(u64),
    /// Before the next input of this type (`ping`, `host_migrate` ...).
    Event(String),
    /// Once a check finds a violation (of this kind, if given).
    Invariant(Option<String>),
}

impl Break {
    fn parse(args: &[&str]) -> Option<Break> {
        match args {
            ["seq", n] => n.parse().ok().map(Break::Seq),
            ["event", t] => Some(Break::Event(t.to_string())),
            ["invariant"] => Some(Break::Invariant(None)),
            ["invariant", k] => Some(Break::Invariant(Some(k.to_string()))),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Break::Seq(n) => format!("before input seq {n}"),
            Break::Event(t) => format!("before the next {t} input"),
            Break::Invariant(None) => "when a check finds a violation".into(),
            Break::Invariant(Some(k)) => format!("when a check finds a {k} violation"),
        }
    }

    /// Whether the replay, between two inputs, stands where this stops.
    fn hits(&self, r: &Replayer<'_>) -> bool {
        match self {
            Break::Seq(n) => r.upcoming_seq() == Some(*n),
            Break::Event(t) => {
                r.upcoming().and_then(|e| serde_json::to_value(e).ok()).is_some_and(|v| v["type"] == t.as_str())
            }
            Break::Invariant(kind) => {
                r.current_violations().iter().any(|v| kind.as_deref().is_none_or(|k| v.starts_with(k)))
            }
        }
    }
}

/// Completion of command names and switch names.
struct Complete {
    switches: Vec<String>,
}

impl Completer for Complete {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _: &rustyline::Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let head = &line[..pos];
        let start = head.rfind(' ').map_or(0, |i| i + 1);
        let word = &head[start..];
        let pool: Vec<String> =
            if start == 0 { COMMANDS.iter().map(|(c, _, _)| c.to_string()).collect() } else { self.switches.clone() };
        let found = pool
            .into_iter()
            .filter(|c| c.starts_with(word))
            .map(|c| Pair { display: c.clone(), replacement: c })
            .collect();
        Ok((start, found))
    }
}

impl Hinter for Complete {
    type Hint = String;
}
impl Highlighter for Complete {}
impl Validator for Complete {}
impl Helper for Complete {}

/// Where commands come from.
enum Input {
    Terminal(Box<Editor<Complete, rustyline::history::DefaultHistory>>),
    Lines(VecDeque<String>),
}

impl Input {
    /// The next command; `None` at the end (Ctrl-D, end of script).
    fn next(&mut self) -> Option<String> {
        match self {
            Input::Terminal(ed) => loop {
                match ed.readline("sts> ") {
                    Ok(line) => {
                        let _ = ed.add_history_entry(line.as_str());
                        return Some(line);
                    }
                    Err(ReadlineError::Interrupted) => {
                        println!("(Ctrl-C: type quit or press Ctrl-D to end the session)");
                    }
                    Err(_) => return None,
                }
            },
            Input::Lines(lines) => {
                let line = lines.pop_front()?;
                println!("sts> {line}");
                Some(line)
            }
        }
    }
}

/// `sts console DIR [--script FILE]`.
pub fn run(engine: &Engine, dir: &Path, script: Option<&Path>) -> u8 {
    let (_, config, trace) = match replay::load(dir) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sts console: {e}");
            return exit::of_error(&e);
        }
    };
    let mut input = match script {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(text) => Input::Lines(text.lines().map(str::to_string).collect()),
            Err(e) => {
                eprintln!("sts console: {}: {e}", path.display());
                return exit::BAD_INPUT;
            }
        },
        None if !std::io::stdin().is_terminal() => {
            let text = std::io::read_to_string(std::io::stdin()).unwrap_or_default();
            Input::Lines(text.lines().map(str::to_string).collect())
        }
        None => {
            let mut ed = match Editor::new() {
                Ok(ed) => ed,
                Err(e) => {
                    eprintln!("sts console: cannot open the terminal: {e}");
                    return exit::ENVIRONMENT;
                }
            };
            let switches = config.topology().switches.iter().map(|s| format!("s{s}")).collect();
            ed.set_helper(Some(Complete { switches }));
            Input::Terminal(Box::new(ed))
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sts console: cannot start the runtime: {e}");
            return exit::ENVIRONMENT;
        }
    };
    let base = dir.join("console");
    let n = (1..).find(|n| !base.join(n.to_string()).exists()).unwrap_or(1);
    let out = base.join(n.to_string());
    eprintln!("sts console: starting the controllers; this session's replay goes to {}", out.display());
    let mut replayer = match rt.block_on(Replayer::start(engine, &config, &trace, &out, n)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sts console: {e}");
            return exit::of_error(&e);
        }
    };
    // The handshakes' progress bar would keep redrawing over the prompt.
    engine.progress(sts_engine::Progress::Done);
    println!("{} inputs to replay; `help` lists the commands.", replayer.position().1);
    let checker = config.checker();
    let interactive = matches!(input, Input::Terminal(_));
    let mut breaks: Vec<Break> = Vec::new();
    loop {
        // While a person reads and types, the run stands still: the
        // controllers are stopped and, on virtual time, no time passes.
        let frozen = interactive.then(|| replayer.session_mut().freeze());
        let line = input.next();
        if let Some(f) = frozen {
            replayer.session_mut().thaw(f);
        }
        let Some(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((&cmd, args)) = words.split_first() else { continue };
        let full = COMMANDS.iter().map(|(c, _, _)| *c).find(|c| *c == cmd || (cmd.len() == 1 && c.starts_with(cmd)));
        match (full, args) {
            (Some("quit"), _) => break,
            (Some("help"), []) => {
                for (c, a, what) in COMMANDS {
                    println!("  {c:<9}{a:<10}{what}");
                }
            }
            (Some("help"), [c]) => match COMMANDS.iter().find(|(name, _, _)| name == c) {
                Some((name, a, what)) => println!("  {name} {a}: {what}"),
                None => println!("no command {c:?}; `help` lists them"),
            },
            (Some("next"), _) => {
                let count = match args.first().map(|a| a.parse::<usize>()) {
                    None => 1,
                    Some(Ok(k)) if k > 0 => k,
                    Some(_) => {
                        println!("next N: N is a number of inputs, at least 1");
                        continue;
                    }
                };
                for _ in 0..count {
                    match rt.block_on(replayer.step()) {
                        Ok(step) => {
                            let stop = !matches!(step, Step::Injected { .. });
                            say_step(&replayer, &step);
                            if stop {
                                break;
                            }
                        }
                        Err(e) => {
                            println!("error: {e}");
                            break;
                        }
                    }
                }
            }
            (Some("continue"), []) => {
                let hit = std::cell::Cell::new(None);
                to_violation(&rt, &mut replayer, |r| {
                    hit.set(breaks.iter().position(|b| b.hits(r)));
                    hit.get().is_some()
                });
                if let Some(i) = hit.get() {
                    println!("stopped at breakpoint {}: {}", i + 1, breaks[i].describe());
                    say_upcoming(&replayer);
                }
            }
            (Some("run-to"), ["violation"]) => to_violation(&rt, &mut replayer, |_| false),
            (Some("run-to"), [seq]) => {
                let Ok(seq) = seq.parse::<u64>() else {
                    println!("run-to SEQ|violation: SEQ is an input's seq in the trace (`where` shows the next)");
                    continue;
                };
                let seqs: Vec<u64> = trace.records.iter().filter(|r| r.external.is_some()).map(|r| r.seq).collect();
                if !seqs.contains(&seq) {
                    println!("no input with seq {seq} (the inputs' seqs: {seqs:?})");
                    continue;
                }
                if replayer.upcoming_seq().is_none_or(|next| next > seq) {
                    println!("input seq {seq} was injected already");
                    continue;
                }
                match rt.block_on(replayer.run_until(|r, _| r.upcoming_seq() == Some(seq))) {
                    Ok(Step::Injected { .. }) => say_upcoming(&replayer),
                    Ok(step) => say_step(&replayer, &step),
                    Err(e) => println!("error: {e}"),
                }
            }
            (Some("break"), args) => match Break::parse(args) {
                Some(b) => {
                    println!("breakpoint {}: {}", breaks.len() + 1, b.describe());
                    breaks.push(b);
                }
                None => println!("break seq N | break event TYPE | break invariant [KIND]"),
            },
            (Some("breaks"), []) => {
                if breaks.is_empty() {
                    println!("no breakpoints");
                }
                for (i, b) in breaks.iter().enumerate() {
                    println!("{}: {}", i + 1, b.describe());
                }
            }
            (Some("delete"), [n]) => match n.parse::<usize>() {
                Ok(k) if (1..=breaks.len()).contains(&k) => {
                    breaks.remove(k - 1);
                    println!("deleted breakpoint {k} (the others are renumbered: `breaks`)");
                }
                _ => println!("no breakpoint {n:?}; `breaks` lists them"),
            },
            (Some("where"), []) => {
                let (next, total) = replayer.position();
                let now = replayer.session().runner.clock.now();
                println!("input {next} of {total} injected; virtual time {now} ms");
                match replayer.upcoming() {
                    Some(e) => println!("next: {}", e.describe()),
                    None => println!("next: nothing (every input injected)"),
                }
                for v in replayer.current_violations() {
                    println!("violated at the last check: {v}");
                }
            }
            (Some("nodes"), []) => nodes(&replayer),
            (Some("links"), []) => links(&replayer),
            (Some("flows"), []) => {
                for (dpid, sw) in &replayer.session().runner.net.switches {
                    println!("s{dpid}:");
                    print!("{}", sts_report::flows::dump(sw));
                }
            }
            (Some("flows"), [s]) => {
                let dpid = s.trim_start_matches('s').parse::<u64>().ok();
                match dpid.and_then(|d| replayer.session().runner.net.switches.get(&d)) {
                    Some(sw) => print!("{}", sts_report::flows::dump(sw)),
                    None => println!("no switch {s:?} (switches are s1, s2 ...; `nodes` lists them)"),
                }
            }
            (Some("check"), []) => {
                let session = replayer.session_mut();
                let facts = observe::facts(session, Vec::new(), Vec::new());
                let report = checker.check(&session.runner.net, &facts);
                if report.violations.is_empty() {
                    println!("no violation");
                }
                for v in &report.violations {
                    print!("{}", sts_report::violation(v));
                }
            }
            (Some(_), _) => println!("{cmd}: wrong arguments; `help {cmd}` says what it takes"),
            (None, _) => println!("unknown command {cmd:?}; `help` lists the commands"),
        }
    }
    match rt.block_on(replayer.finish()) {
        Ok(r) => {
            println!(
                "session ended after {} inputs; {}; trace: {}",
                r.injected,
                match &r.violation {
                    Some(v) if r.reproduced => format!("the violation reproduced: {}", v.summary),
                    Some(v) => format!("found instead: {}", v.summary),
                    None => "no violation".into(),
                },
                r.trace.display()
            );
        }
        Err(e) => eprintln!("sts console: {e}"),
    }
    exit::OK
}

/// Injects inputs until `stop` holds after one (then says nothing: the
/// caller says why it stopped) or, past the last, waits as a replay does for
/// the violation; says what came of it.
fn to_violation<'t>(
    rt: &tokio::runtime::Runtime,
    replayer: &mut Replayer<'t>,
    mut stop: impl FnMut(&Replayer<'t>) -> bool,
) {
    let mut stopped = false;
    let run = async {
        let step = replayer
            .run_until(|r, _| {
                stopped = stop(r);
                stopped
            })
            .await?;
        let settled = if step == Step::End { Some(replayer.settle().await?) } else { None };
        Ok::<_, sts_engine::RunError>((step, settled))
    };
    let result = rt.block_on(run);
    match result {
        _ if stopped => {}
        Ok((_, Some(true))) => say_step(replayer, &Step::Reproduced),
        Ok((_, Some(false))) => println!("every input injected; the violation did not show up (`check` looks now)"),
        Ok((step, None)) => say_step(replayer, &step),
        Err(e) => println!("error: {e}"),
    }
}

/// Where the replay stands: inputs injected, the next one.
fn say_upcoming(r: &Replayer<'_>) {
    let (next, total) = r.position();
    match (r.upcoming(), r.upcoming_seq()) {
        (Some(e), Some(seq)) => println!("input {next} of {total} injected; next: {} (seq {seq})", e.describe()),
        _ => println!("every input injected"),
    }
}

fn say_step(r: &Replayer<'_>, step: &Step) {
    match step {
        Step::Injected { index, seq } => {
            let (_, total) = r.position();
            let what = r.injected_input(*index).map_or_else(String::new, |e| e.describe());
            println!("input {} of {total} (seq {seq}) at {} ms: {what}", index + 1, r.session().runner.clock.now());
        }
        Step::Reproduced => match r.violation() {
            Some(v) => print!("the violation showed up:\n{}", sts_report::violation(v)),
            None => println!("the violation showed up"),
        },
        Step::End => println!("every input injected; `continue` waits for the violation, `quit` ends"),
    }
}

fn nodes(r: &Replayer<'_>) {
    let session = r.session();
    let net = &session.runner.net;
    let down = session.runner.disconnected();
    for (dpid, sw) in &net.switches {
        let flows: usize = sw.tables.iter().map(|t| t.entries().len()).sum();
        let state = if down.contains(dpid) { "no controller connection" } else { "connected" };
        println!("s{dpid}: OpenFlow {:#x}, {} ports, {flows} flows, {state}", sw.version, sw.ports.len());
    }
    for h in &net.hosts {
        println!("{}: {} {}", h.name, h.ip, h.mac);
    }
    for i in 0..session.controllers.len() {
        let state = if session.crashed.contains(&i) { "crashed" } else { "running" };
        println!("{}: {state}", observe::controller_name(i));
    }
}

fn links(r: &Replayer<'_>) {
    let net = &r.session().runner.net;
    for ((a, pa), (b, pb)) in net.switch_links() {
        let up = net.live_peer(sts_mocknet::Endpoint::Switch { dpid: a, port: pa }).is_some();
        println!("s{a}:{pa} - s{b}:{pb} {}", if up { "up" } else { "down" });
    }
    for (i, h) in net.hosts.iter().enumerate() {
        match net.live_peer(sts_mocknet::Endpoint::Host(i)) {
            Some(sts_mocknet::Endpoint::Switch { dpid, port }) => println!("{} - s{dpid}:{port} up", h.name),
            _ => println!("{} unplugged", h.name),
        }
    }
}
