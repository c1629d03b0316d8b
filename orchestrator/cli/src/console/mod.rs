//! `sts console`: step through a recorded trace with the real controllers
//! (`sts console DIR`), or drive a live session by hand (`sts console
//! --config FILE DIR`); look at the network between steps, hold and act on
//! single OpenFlow messages, inject inputs, and go back in time.
//!
//! The run is the engine's [`Replayer`] (a live session replays an empty
//! trace); this module reads commands (rustyline on a terminal: history,
//! completion; plain lines from `--script FILE` or a pipe, echoed after the
//! prompt), acts, and prints each reply as text or, with `--json`, as one
//! JSON object per line. Everything done to the run is recorded in its
//! trace: inputs typed by hand and message actions are external events, so
//! `save` gives an experiment that replays what the session did.
//!
//! Time travel: `checkpoint` forks every controller (the shim's mid-run
//! checkpoints, as PEEK uses them) and keeps the network's and the replay's
//! state; `rewind` resumes from there. Where checkpoints cannot be taken
//! (real time, controllers not forked from snapshots, relays), `rewind`
//! replays the session's own steps from the start instead, and says so.

mod commands;
mod show;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Editor, Helper};
use serde_json::json;
use sts_engine::config::Config;
use sts_engine::replay::{self, Mark, Replayer, Step};
use sts_engine::{monitor, Engine, RunError};
use sts_trace::{External, Fate, Header, MsgType, Trace};
use tokio::runtime::Runtime;

use crate::exit;
use commands::{Break, COMMANDS};
use show::Reply;

/// How `sts console` was asked to run.
pub struct Options<'a> {
    /// The experiment to replay, or (with `config`) to create for a live session.
    pub dir: &'a Path,
    /// A live session of this config, recorded into `dir`.
    pub config: Option<&'a Path>,
    pub script: Option<&'a Path>,
    pub json: bool,
}

/// What completion offers after a command word: per command (held message
/// ids after `drop`, checkpoint names after `rewind` ...), else everything.
#[derive(Default)]
struct Words {
    by_command: std::collections::BTreeMap<&'static str, Vec<String>>,
    all: Vec<String>,
}

/// Completion of command names, then of what each command takes.
struct Complete {
    words: Arc<Mutex<Words>>,
}

impl Completer for Complete {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _: &rustyline::Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        let head = &line[..pos];
        let start = head.rfind(' ').map_or(0, |i| i + 1);
        let word = &head[start..];
        let command = head.split_whitespace().next().and_then(commands::resolve).map(|c| c.name);
        let pool: Vec<String> = if start == 0 {
            COMMANDS.iter().map(|c| c.name.to_string()).collect()
        } else {
            self.words
                .lock()
                .map(|w| command.and_then(|c| w.by_command.get(c)).unwrap_or(&w.all).clone())
                .unwrap_or_default()
        };
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
    Lines { lines: VecDeque<String>, echo: bool },
}

impl Input {
    /// The next command; `None` at the end (Ctrl-D, end of script). On a
    /// terminal an empty line is `next`.
    fn next(&mut self) -> Option<String> {
        match self {
            Input::Terminal(ed) => loop {
                match ed.readline("sts> ") {
                    Ok(line) if line.trim().is_empty() => return Some("next".into()),
                    Ok(line) => {
                        let _ = ed.add_history_entry(line.as_str());
                        return Some(line);
                    }
                    Err(ReadlineError::Interrupted) => {
                        outln!("(Ctrl-C: type quit or press Ctrl-D to end the session)");
                    }
                    Err(_) => return None,
                }
            },
            Input::Lines { lines, echo } => {
                let line = lines.pop_front()?;
                if *echo {
                    outln!("sts> {}", sts_trace::bounded_message(line.clone(), show::MAX_QUOTED));
                }
                Some(line)
            }
        }
    }
}

/// What the session did, in order: enough to do it again from the start
/// (`rewind --replay`).
#[derive(Debug, Clone)]
enum Act {
    /// The trace's next input was injected.
    Step,
    /// The run went on to this time (ms) without injecting.
    RunTo(u64),
    /// An input typed by hand (or a message action).
    Inject(External),
    /// The trace's next input was passed over (`skip`).
    Skip,
}

/// A checkpoint the session can go back to.
struct Named {
    name: String,
    /// The controllers' and network's state; `None` when checkpoints could
    /// not be taken (a rewind replays instead).
    mark: Option<Mark>,
    /// What the session did before it (its own copy: a rewind elsewhere
    /// cuts the session's list).
    acts: Vec<Act>,
    at_ms: u64,
    injected: usize,
}

/// A console session: the run, and what the person set up around it.
struct Console<'t> {
    engine: &'t Engine,
    config: Config,
    config_text: String,
    trace: &'t Trace,
    live: bool,
    replayer: Replayer<'t>,
    out: PathBuf,
    run: u32,
    breaks: Vec<Break>,
    marks: Vec<Named>,
    /// Checkpoints replaced or left behind: controllers running now may
    /// have been resumed from them, and die with them.
    retired: Vec<Mark>,
    acts: Vec<Act>,
    interrupted: Arc<AtomicBool>,
    /// Interposer sequence number from which a held message counts as new
    /// for message breakpoints.
    msg_from: u64,
    rewinds_by_replay: u32,
    words: Arc<Mutex<Words>>,
}

fn load_text(path: &Path) -> Result<String, RunError> {
    std::fs::read_to_string(path).map_err(|e| RunError::BadInput(format!("{}: {e}", path.display())))
}

/// `sts console`.
pub fn run(engine: &Engine, o: Options<'_>) -> u8 {
    match start(engine, &o) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sts console: {e}");
            exit::of_error(&e)
        }
    }
}

fn start(engine: &Engine, o: &Options<'_>) -> Result<u8, RunError> {
    // What to run: a recorded experiment, or a new one for a live session.
    let (config, config_text, trace, out, run) = match o.config {
        Some(file) => {
            let text = load_text(file)?;
            let config = Config::load(file)?;
            let exp = sts_engine::fuzz::create_experiment(&config, &text, o.dir).map_err(|e| match e {
                // A recorded experiment there: the user may have meant to replay it.
                RunError::BadInput(m) if o.dir.join("trace.jsonl").is_file() => RunError::BadInput(format!(
                    "{m}; `sts console {}` (without --config) steps through it",
                    o.dir.display()
                )),
                e => e,
            })?;
            let config = Config::load(&exp.config())?;
            let text = load_text(&exp.config())?;
            (config, text, Trace { header: Header::new(None), records: Vec::new() }, exp.dir, 0)
        }
        None => {
            let (exp, config, trace) = replay::load(o.dir, None)?;
            let text = load_text(&exp.config())?;
            let base = o.dir.join("console");
            let n = (1..).find(|n| !base.join(n.to_string()).exists()).unwrap_or(1);
            (config, text, trace, base.join(n.to_string()), n)
        }
    };
    let interactive = o.script.is_none() && std::io::stdin().is_terminal();
    let words = Arc::new(Mutex::new(Words::default()));
    let mut input = match o.script {
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|e| RunError::BadInput(format!("{}: {e}", path.display())))?;
            let text = read_script(file, &path.display().to_string())?;
            Input::Lines { lines: text.lines().map(str::to_string).collect(), echo: !o.json }
        }
        None if !interactive => {
            let text = read_script(std::io::stdin(), "the console's standard input")?;
            Input::Lines { lines: text.lines().map(str::to_string).collect(), echo: !o.json }
        }
        None => {
            // Tab lists the candidates (as bash does) rather than cycling through them.
            let config = rustyline::Config::builder().completion_type(rustyline::CompletionType::List).build();
            let mut ed = Editor::with_config(config)
                .map_err(|e| RunError::Environment(format!("cannot open the terminal: {e}")))?;
            ed.set_helper(Some(Complete { words: words.clone() }));
            Input::Terminal(Box::new(ed))
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Environment(format!("cannot start the runtime: {e}")))?;
    let interrupted = Arc::new(AtomicBool::new(false));
    if interactive {
        // Ctrl-C while the run goes (the prompt reads its own): pause it.
        let flag = interrupted.clone();
        let _inside = rt.enter();
        if let Ok(mut sigint) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            rt.spawn(async move {
                while sigint.recv().await.is_some() {
                    flag.store(true, Ordering::SeqCst);
                }
            });
        }
    }
    eprintln!(
        "sts console: starting the controllers; this session's trace goes to {}",
        out.join("trace.jsonl").display()
    );
    let replayer = rt.block_on(Replayer::start(engine, &config, &trace, &out, run))?;
    // The handshakes' progress bar would keep redrawing over the prompt.
    engine.progress(sts_engine::Progress::Done);
    let mut console = Console {
        engine,
        config,
        config_text,
        trace: &trace,
        live: o.config.is_some(),
        replayer,
        out: out.clone(),
        run,
        breaks: Vec::new(),
        marks: Vec::new(),
        retired: Vec::new(),
        acts: Vec::new(),
        interrupted,
        msg_from: 0,
        rewinds_by_replay: 0,
        words,
    };
    if console.live {
        eprintln!("live session: nothing to replay; type inputs (`help` lists the commands)");
    } else {
        eprintln!("{} inputs to replay; `help` lists the commands.", console.replayer.position().1);
    }
    loop {
        console.update_words();
        // While a person reads and types, the run stands still: the
        // controllers are stopped and, on virtual time, no time passes.
        let frozen = interactive.then(|| console.replayer.session_mut().freeze());
        let line = input.next();
        if let Some(f) = frozen {
            console.replayer.session_mut().thaw(f);
        }
        let Some(line) = line else { break };
        let typed: Vec<&str> = line.split_whitespace().collect();
        // Mininet's phrasing (`h1 ping h2`, `net` ...) in this console's words.
        let hosts: Vec<String> = console.replayer.session().runner.net.hosts.iter().map(|h| h.name.clone()).collect();
        let rewritten = commands::mininet(&typed, &hosts);
        let words: Vec<&str> =
            rewritten.as_ref().map_or_else(|| typed.clone(), |v| v.iter().map(String::as_str).collect());
        let Some((&cmd, args)) = words.split_first() else { continue };
        if commands::resolve(cmd).is_some_and(|c| c.name == "quit") {
            break;
        }
        let reply = console.command(&rt, cmd, args);
        reply.print(line.trim(), o.json);
    }
    let Console { replayer, live, out, retired, marks, .. } = console;
    let ended = rt.block_on(replayer.finish());
    // The controllers resumed from checkpoints go with them.
    drop((marks, retired));
    let mut reply = Reply::new();
    match ended {
        Ok(r) => {
            reply.say(format!(
                "session ended after {} inputs; {}; trace: {}",
                r.injected,
                match &r.violation {
                    Some(v) if r.reproduced && !live => format!("the violation reproduced: {}", v.summary),
                    Some(v) if live => format!("violation: {}", v.summary),
                    Some(v) => format!("found instead: {}", v.summary),
                    None => "no violation".into(),
                },
                r.trace.display()
            ));
            if live {
                reply.say(format!("the session is an experiment: `sts replay {}` runs it again", out.display()));
            }
            reply.set("injected", json!(r.injected));
            reply.set("violation", json!(r.violation.as_ref().map(|v| v.summary.clone())));
        }
        Err(e) => reply.fail(format!("sts console: {e}")),
    }
    reply.print("quit", o.json);
    Ok(exit::OK)
}

impl<'t> Console<'t> {
    /// Refreshes what completion offers after a command word.
    fn update_words(&self) {
        let s = self.replayer.session();
        let names = commands::Names {
            switches: s.runner.net.switches.keys().map(|d| format!("s{d}")).collect(),
            hosts: s.runner.net.hosts.iter().map(|h| h.name.clone()).collect(),
            controllers: (0..s.controllers.len()).map(monitor::controller_name).collect(),
            checkpoints: self.marks.iter().map(|m| m.name.clone()).collect(),
            held: s.runner.interposer.waiting().iter().filter(|m| m.due.is_none()).map(|m| m.seq.to_string()).collect(),
            relays: s.relays.keys().cloned().collect(),
            policies: s.policies.keys().cloned().collect(),
        };
        let by = COMMANDS
            .iter()
            .filter(|c| !c.completes.is_empty())
            .map(|c| (c.name, commands::completions(c, &names)))
            .collect();
        let all = [
            &names.switches[..],
            &names.hosts,
            &names.controllers,
            &names.checkpoints,
            &names.held,
            &["all".to_string()],
            &names.relays,
        ]
        .concat();
        if let Ok(mut words) = self.words.lock() {
            *words = Words { by_command: by, all };
        }
    }

    fn now(&self) -> u64 {
        self.replayer.session().runner.clock.now()
    }

    fn command(&mut self, rt: &Runtime, cmd: &str, args: &[&str]) -> Reply {
        let mut out = Reply::new();
        let Some(c) = commands::resolve(cmd) else {
            match commands::did_you_mean(cmd) {
                Some(meant) => {
                    out.fail(format!("unknown command {cmd:?}: did you mean `{meant}`? (`help` lists the commands)"))
                }
                None => out.fail(format!("unknown command {cmd:?}; `help` lists the commands")),
            }
            return out;
        };
        let net = &self.replayer.session().runner.net;
        if let Some(parsed) = commands::input(net, c.name, args) {
            match parsed {
                Ok(e) => self.inject(rt, e, &mut out),
                Err(m) => out.fail(m),
            }
            return out;
        }
        match (c.name, args) {
            ("help", []) => commands::help_lines().into_iter().for_each(|l| out.say(l)),
            ("help", [name]) => match commands::resolve(name) {
                Some(c) => out.say(format!("{} {}: {}", c.name, c.args, c.what)),
                None => out.fail(format!("no command {name:?}; `help` lists them")),
            },
            ("next", _) => self.next(rt, args, &mut out),
            ("skip", []) => self.skip(1, &mut out),
            ("skip", [n]) => match n.parse::<usize>() {
                Ok(k) if k > 0 => self.skip(k, &mut out),
                _ => out.fail("skip N: N is a number of inputs, at least 1"),
            },
            ("instead", [input, rest @ ..]) => {
                let Some(c) = commands::resolve(input) else {
                    return fail_msg(out, format!("instead: unknown input {input:?}; `help` lists the inputs"));
                };
                let net = &self.replayer.session().runner.net;
                match commands::input(net, c.name, rest) {
                    Some(Ok(e)) => {
                        if self.replayer.upcoming().is_none() {
                            return fail_msg(
                                out,
                                "instead: every input of the trace is in already; type the input alone",
                            );
                        }
                        self.skip(1, &mut out);
                        self.inject(rt, e, &mut out);
                    }
                    Some(Err(m)) => out.fail(m),
                    None => out.fail(format!("instead: {input:?} is not an input (link, switch, migrate, ping ...)")),
                }
            }
            ("instead", []) => out.fail("usage: instead INPUT ... (e.g. `instead migrate h3 s2`)"),
            ("continue", []) => {
                let breaks = self.breaks.clone();
                let hit = std::cell::Cell::new(None);
                self.run_to_violation(rt, &mut out, |r| {
                    hit.set(breaks.iter().position(|b| hits(b, r)));
                    hit.get().is_some()
                });
                if let Some(i) = hit.get() {
                    out.say(format!("stopped at breakpoint {}: {}", i + 1, self.breaks[i].describe()));
                    self.say_upcoming(&mut out);
                }
            }
            ("run-to", ["violation"]) => self.run_to_violation(rt, &mut out, |_| false),
            ("run-to", [to]) => self.run_to(rt, to, &mut out),
            ("where", []) => self.where_(&mut out),
            ("break", args) => match Break::parse(args) {
                Ok(b) => {
                    if let Break::Msg { msg_type, switch } = &b {
                        let hold = External::ControlHold { switch: *switch, msg_type: *msg_type };
                        self.inject(rt, hold, &mut out);
                        if !out.ok {
                            return out;
                        }
                    }
                    if self.breaks.iter().all(|b| !matches!(b, Break::Msg { .. })) {
                        self.msg_from = self.replayer.session().runner.interposer.seen();
                    }
                    out.say(format!("breakpoint {}: {}", self.breaks.len() + 1, b.describe()));
                    self.breaks.push(b);
                }
                Err(usage) => out.fail(usage),
            },
            ("breaks", []) => {
                if self.breaks.is_empty() {
                    out.say("no breakpoints");
                }
                for (i, b) in self.breaks.iter().enumerate() {
                    out.say(format!("{}: {}", i + 1, b.describe()));
                }
            }
            ("delete", [n]) => match n.parse::<usize>() {
                Ok(k) if (1..=self.breaks.len()).contains(&k) => {
                    if let Break::Msg { switch, .. } = self.breaks.remove(k - 1) {
                        self.inject(rt, External::ControlRelease { switch }, &mut out);
                    }
                    out.say(format!("deleted breakpoint {k} (the others are renumbered: `breaks`)"));
                }
                _ => out.fail(format!("no breakpoint {n:?}; `breaks` lists them")),
            },
            ("nodes", []) => show::nodes(self.replayer.session(), &mut out),
            ("links", []) => show::links(self.replayer.session(), &mut out),
            ("hosts", []) => show::hosts(self.replayer.session(), &mut out),
            ("ports", [] | [_]) => show::ports(self.replayer.session(), args.first().copied(), &mut out),
            ("groups", [] | [_]) => show::groups(self.replayer.session(), args.first().copied(), &mut out),
            ("flows", args) if args.len() <= 2 => {
                let stats = args.contains(&"--stats");
                let rest: Vec<&str> = args.iter().copied().filter(|a| *a != "--stats").collect();
                match rest.as_slice() {
                    [] | [_] => show::flows(self.replayer.session(), rest.first().copied(), stats, &mut out),
                    _ => out.fail("usage: flows [SWITCH] [--stats]"),
                }
            }
            ("check", [] | [_]) => self.check(args.first().copied(), &mut out),
            ("path", [a, b]) => show::path(self.replayer.session(), a, b, &mut out),
            ("pending", []) => show::pending(self.replayer.session(), &mut out),
            ("deliver", [id]) => self.fate(rt, id, Fate::Deliver, &mut out),
            ("drop", [id]) => self.fate(rt, id, Fate::Drop, &mut out),
            ("delay", [id, ms]) => match ms.parse::<u64>() {
                Ok(ms) => self.fate(rt, id, Fate::Delay { ms }, &mut out),
                Err(_) => out.fail(format!("delay ID MS: {ms:?} is not a number of milliseconds")),
            },
            ("pingall", []) => self.pingall(rt, &mut out),
            ("checkpoint", [] | [_]) => self.checkpoint(rt, args.first().copied(), &mut out),
            ("rewind", _) => {
                let by_replay = args.first() == Some(&"--replay");
                let rest = if by_replay { &args[1..] } else { args };
                match rest {
                    [] | [_] => self.rewind(rt, rest.first().copied(), by_replay, &mut out),
                    _ => out.fail("usage: rewind [--replay] [NAME]"),
                }
            }
            ("checkpoints", []) => {
                if self.marks.is_empty() {
                    out.say("no checkpoints (`checkpoint [NAME]` takes one)");
                }
                for m in &self.marks {
                    let how = match &m.mark {
                        Some(mark) => format!("controllers checkpointed, rewound to {} times", mark.rewinds),
                        None => "no controller checkpoints: rewinding replays".into(),
                    };
                    out.say(format!("{}: at {} ms, after {} inputs; {how}", m.name, m.at_ms, m.injected));
                }
            }
            ("log", [] | [_]) => match args.first().map(|n| n.parse::<usize>()) {
                Some(Err(_)) => out.fail("log [N]: N is a number of events"),
                n => {
                    if let Err(e) = self.replayer.flush() {
                        return fail(out, e);
                    }
                    show::log(self.replayer.trace_path(), n.and_then(Result::ok).unwrap_or(10), &mut out);
                }
            },
            ("save", [dir]) => match self.replayer.save(Path::new(dir), &self.config_text) {
                Ok(d) => {
                    let v = self.replayer.violation().map(|v| v.summary.clone());
                    out.say(format!(
                        "saved the session as {} ({}); `sts replay {}` runs it again",
                        d.display(),
                        v.as_deref().map_or("no violation yet".into(), |v| format!("violation: {v}")),
                        d.display()
                    ));
                    out.set("saved", json!(d));
                }
                Err(e) => out.fail(format!("save: {e}")),
            },
            ("export", ["pcap", file]) => self.export_pcap(Path::new(file), &mut out),
            (name, _) => out.fail(format!("{name}: wrong arguments; `help {name}` says what it takes")),
        }
        out
    }

    /// The message breakpoints: (type, switch).
    fn msg_breaks(&self) -> Vec<(MsgType, Option<u64>)> {
        self.breaks
            .iter()
            .filter_map(|b| match b {
                Break::Msg { msg_type, switch } => Some((*msg_type, *switch)),
                _ => None,
            })
            .collect()
    }

    /// Makes the run pause on Ctrl-C and on message breakpoints (for a
    /// message held since the last such stop).
    fn arm(&mut self) {
        self.interrupted.store(false, Ordering::SeqCst);
        let flag = self.interrupted.clone();
        let msgs = self.msg_breaks();
        let from = self.msg_from;
        self.replayer.set_pause(Some(Box::new(move |s| {
            flag.load(Ordering::SeqCst) || (!msgs.is_empty() && new_held(s, from, &msgs).is_some())
        })));
    }

    /// After a run: why it paused, if it did.
    fn explain_pause(&mut self, out: &mut Reply) -> bool {
        self.replayer.set_pause(None);
        if self.interrupted.swap(false, Ordering::SeqCst) {
            out.say(format!("interrupted (Ctrl-C) at {} ms", self.now()));
            self.say_upcoming(out);
            return true;
        }
        let msgs = self.msg_breaks();
        if let Some((seq, dpid, msg_type)) = new_held(self.replayer.session(), self.msg_from, &msgs) {
            let i = self.breaks.iter().position(|b| {
                matches!(b, Break::Msg { msg_type: t, switch } if *t == msg_type && switch.is_none_or(|d| d == dpid))
            });
            out.say(format!(
                "stopped at breakpoint {}: {msg_type} of s{dpid} held as message {seq} (`pending` lists what is held; `deliver {seq}`, `drop {seq}`)",
                i.map_or(0, |i| i + 1)
            ));
            out.set("held", json!(seq));
            self.msg_from = self.replayer.session().runner.interposer.seen();
            return true;
        }
        false
    }

    fn next(&mut self, rt: &Runtime, args: &[&str], out: &mut Reply) {
        let count = match args {
            [] => 1,
            [n] => match n.parse::<usize>() {
                Ok(k) if k > 0 => k,
                _ => return out.fail("next N: N is a number of inputs, at least 1"),
            },
            _ => return out.fail("usage: next [N]"),
        };
        if self.live {
            return out.fail("a live session has no trace to step through: type inputs, or `run-to +1s`");
        }
        self.arm();
        for _ in 0..count {
            match rt.block_on(self.replayer.step()) {
                Ok(step) => {
                    if matches!(step, Step::Injected { .. }) {
                        self.acts.push(Act::Step);
                    }
                    if step == Step::Paused {
                        self.explain_pause(out);
                        return;
                    }
                    self.say_step(&step, out);
                    if !matches!(step, Step::Injected { .. }) {
                        break;
                    }
                }
                Err(e) => {
                    out.fail(format!("error: {e}"));
                    break;
                }
            }
        }
        self.replayer.set_pause(None);
    }

    /// `skip N`: passes over the trace's next N inputs.
    fn skip(&mut self, count: usize, out: &mut Reply) {
        if self.live {
            return out.fail("a live session has no trace to skip in");
        }
        let total = self.replayer.position().1;
        for _ in 0..count {
            match self.replayer.skip() {
                Some((index, seq, e)) => {
                    self.acts.push(Act::Skip);
                    out.say(format!("skipped input {} of {total} (seq {seq}): {}", index + 1, e.describe()));
                }
                None => {
                    out.say("no input left to skip");
                    break;
                }
            }
        }
        self.say_upcoming(out);
    }

    /// Injects inputs until `stop` holds after one (the caller says why it
    /// stopped) or, past the last, waits as a replay does for the violation;
    /// says what came of it.
    fn run_to_violation(&mut self, rt: &Runtime, out: &mut Reply, mut stop: impl FnMut(&Replayer<'t>) -> bool) {
        self.arm();
        let mut stopped = false;
        let mut steps = 0usize;
        let replayer = &mut self.replayer;
        let run = async {
            let step = replayer
                .run_until(|r, s| {
                    if matches!(s, Step::Injected { .. }) {
                        steps += 1;
                    }
                    stopped = stop(r);
                    stopped
                })
                .await?;
            let settled = if step == Step::End { Some(replayer.settle().await?) } else { None };
            Ok::<_, RunError>((step, settled))
        };
        let result = rt.block_on(run);
        self.acts.extend(std::iter::repeat_n(Act::Step, steps));
        if self.explain_pause(out) {
            return;
        }
        match result {
            _ if stopped => {}
            Ok((_, Some(true))) => self.say_step(&Step::Reproduced, out),
            Ok((_, Some(false))) => out.say("every input injected; the violation did not show up (`check` looks now)"),
            Ok((step, None)) => self.say_step(&step, out),
            Err(e) => out.fail(format!("error: {e}")),
        }
        self.acts.push(Act::RunTo(self.now()));
    }

    fn run_to(&mut self, rt: &Runtime, to: &str, out: &mut Reply) {
        let now = self.now();
        if let Some(t) = commands::time_ms(to, now) {
            if t <= now {
                return out.fail(format!("the run is at {now} ms already"));
            }
            self.arm();
            // The trace's inputs that come due on the way go in, as a replay
            // would inject them; then the run goes on to the time.
            let mut injected = 0;
            while self.replayer.upcoming_due().is_some_and(|due| due <= t) {
                match rt.block_on(self.replayer.step()) {
                    Ok(Step::Injected { .. }) => {
                        self.acts.push(Act::Step);
                        injected += 1;
                    }
                    Ok(Step::Reproduced) => {
                        self.acts.push(Act::RunTo(self.now()));
                        return self.say_step(&Step::Reproduced, out);
                    }
                    Ok(Step::Paused) => {
                        self.acts.push(Act::RunTo(self.now()));
                        self.explain_pause(out);
                        return;
                    }
                    Ok(Step::End) => break,
                    Err(e) => return out.fail(format!("error: {e}")),
                }
            }
            let now = self.now();
            let found = if now < t { rt.block_on(self.replayer.run_for(t - now)) } else { Ok(false) };
            self.acts.push(Act::RunTo(self.now()));
            if self.explain_pause(out) {
                return;
            }
            match found {
                Ok(true) => self.say_step(&Step::Reproduced, out),
                Ok(false) if injected > 0 => {
                    out.say(format!("{injected} inputs injected on the way; at {} ms", self.now()));
                    self.say_upcoming(out);
                }
                Ok(false) => out.say(format!("at {} ms", self.now())),
                Err(e) => out.fail(format!("error: {e}")),
            }
            return;
        }
        let Ok(seq) = to.parse::<u64>() else {
            return out.fail(
                "run-to SEQ|TIME|violation: SEQ is an input's seq in the trace (`where` shows the next); TIME is 2.5s, 800ms or +1s",
            );
        };
        let seqs: Vec<u64> = self.trace.records.iter().filter(|r| r.external().is_some()).map(|r| r.seq).collect();
        if !seqs.contains(&seq) {
            return out.fail(format!("no input with seq {seq} (the inputs' seqs: {seqs:?})"));
        }
        if self.replayer.upcoming_seq().is_none_or(|next| next > seq) {
            return out.fail(format!("input seq {seq} was injected already"));
        }
        self.arm();
        let mut steps = 0usize;
        let result = rt.block_on(self.replayer.run_until(|r, _| {
            steps += 1;
            r.upcoming_seq() == Some(seq)
        }));
        self.acts.extend(std::iter::repeat_n(Act::Step, steps));
        if self.explain_pause(out) {
            return;
        }
        match result {
            Ok(Step::Injected { .. }) => self.say_upcoming(out),
            Ok(step) => self.say_step(&step, out),
            Err(e) => out.fail(format!("error: {e}")),
        }
    }

    fn inject(&mut self, rt: &Runtime, e: External, out: &mut Reply) {
        match rt.block_on(self.replayer.inject(&e)) {
            Ok(seq) => {
                out.say(format!("injected at {} ms: {} (seq {seq} of this session's trace)", self.now(), e.describe()));
                out.set("seq", json!(seq));
                self.acts.push(Act::Inject(e));
            }
            Err(err) => out.fail(format!("{}: {err}", e.describe())),
        }
    }

    /// `deliver|drop|delay ID`: the held message's fate, recorded as an
    /// input; `all` does it to every held message, oldest first.
    fn fate(&mut self, rt: &Runtime, id: &str, fate: Fate, out: &mut Reply) {
        let waiting = self.replayer.session().runner.interposer.waiting();
        if id == "all" {
            let held: Vec<u64> = waiting.iter().filter(|w| w.due.is_none()).map(|w| w.seq).collect();
            if held.is_empty() {
                return out.fail("no message is held (`pending` lists what waits)");
            }
            for seq in held {
                self.fate(rt, &seq.to_string(), fate, out);
                if !out.ok {
                    return;
                }
            }
            return;
        }
        let Some(w) = id.parse::<u64>().ok().and_then(|seq| waiting.iter().find(|w| w.seq == seq)) else {
            return out.fail(format!("no message {id} is held (`pending` lists them)"));
        };
        if let Some(t) = w.due {
            return out.fail(format!("message {id} is not held: it goes at {t} ms, in its turn"));
        }
        let index = waiting
            .iter()
            .filter(|x| {
                x.due.is_none() && x.channel.dpid == w.channel.dpid && x.msg_type == w.msg_type && x.seq < w.seq
            })
            .count() as u32;
        let e = External::HeldMessage { switch: w.channel.dpid, msg_type: MsgType::recorded(w.msg_type), index, fate };
        self.inject(rt, e, out);
    }

    fn pingall(&mut self, rt: &Runtime, out: &mut Reply) {
        let net = &self.replayer.session().runner.net;
        let hosts: Vec<(String, std::net::Ipv4Addr)> = net.hosts.iter().map(|h| (h.name.clone(), h.ip)).collect();
        let answered = |r: &Replayer<'_>, src: usize, dst: std::net::Ipv4Addr| {
            r.session().runner.net.hosts[src].echo_replies.iter().filter(|(from, _)| *from == dst).count()
        };
        let counts_before: Vec<Vec<usize>> =
            (0..hosts.len()).map(|s| hosts.iter().map(|(_, ip)| answered(&self.replayer, s, *ip)).collect()).collect();
        // One ping at a time, each waited for (answered, or 1 s of the
        // run's time), as Mininet's pingall does: the session's trace then
        // holds each ping with what it caused before the next, and a replay
        // of it finds every message where it waits for it (pings sent all
        // at once race each other's ARP and learning, differently each run).
        let mut pairs = Vec::new();
        'pairs: for (s, (src, _)) in hosts.iter().enumerate() {
            for (d, (dst, _)) in hosts.iter().enumerate() {
                if s == d {
                    continue;
                }
                let e = External::Ping { src: src.clone(), dst: dst.clone() };
                if let Err(err) = rt.block_on(self.replayer.inject(&e)) {
                    return out.fail(format!("{}: {err}", e.describe()));
                }
                self.acts.push(Act::Inject(e));
                pairs.push((s, d));
                self.arm();
                let until = self.now() + 1000;
                while self.now() < until && answered(&self.replayer, s, hosts[d].1) <= counts_before[s][d] {
                    if let Err(e) = rt.block_on(self.replayer.run_for(10)) {
                        return out.fail(format!("error: {e}"));
                    }
                    if self.interrupted.load(Ordering::SeqCst) {
                        break;
                    }
                }
                self.acts.push(Act::RunTo(self.now()));
                if self.interrupted.load(Ordering::SeqCst) {
                    break 'pairs;
                }
            }
        }
        self.explain_pause(out);
        let mut ok = 0;
        for &(s, d) in &pairs {
            let replied = answered(&self.replayer, s, hosts[d].1) > counts_before[s][d];
            ok += usize::from(replied);
            if !replied {
                out.say(format!("{} -> {}: no reply", hosts[s].0, hosts[d].0));
            }
        }
        out.say(format!("{ok}/{} pings answered by {} ms", pairs.len(), self.now()));
        out.set("answered", json!(ok));
        out.set("pings", json!(pairs.len()));
    }

    fn check(&mut self, kind: Option<&str>, out: &mut Reply) {
        let session = self.replayer.session_mut();
        let checker = monitor::checker(&self.config, session);
        let facts = monitor::facts(session, Vec::new(), Vec::new());
        let report = checker.check(&session.runner.net, &facts);
        let found: Vec<_> =
            report.violations.iter().filter(|v| kind.is_none_or(|k| v.fingerprint().starts_with(k))).collect();
        if found.is_empty() {
            out.say("no violation");
        }
        for v in &found {
            out.say(sts_report::violation(v));
        }
        out.set("violations", json!(found.iter().map(|v| v.summary.clone()).collect::<Vec<_>>()));
    }

    fn checkpoint(&mut self, rt: &Runtime, name: Option<&str>, out: &mut Reply) {
        if let Some(short) = descriptors_short(CHECKPOINT_MARGIN) {
            return out.fail(format!("no checkpoint taken: {short}"));
        }
        let name = name.map_or_else(|| format!("c{}", self.marks.len() + 1), str::to_string);
        let started = Instant::now();
        let taken = rt.block_on(self.replayer.checkpoint());
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let (mark, how) = match taken {
            Ok(m) => (Some(m), format!("in {ms:.1} ms")),
            Err(e) => (
                None,
                format!("without controller checkpoints ({e}); `rewind` to it replays the session from the start"),
            ),
        };
        let named = Named {
            name: name.clone(),
            mark,
            acts: self.acts.clone(),
            at_ms: self.now(),
            injected: self.position_injected(),
        };
        out.say(format!("checkpoint {name} at {} ms, after {} inputs, {how}", named.at_ms, named.injected));
        out.set("name", json!(name));
        out.set("at_ms", json!(named.at_ms));
        out.set("took_ms", json!((ms * 10.0).round() / 10.0));
        if let Some(i) = self.marks.iter().position(|m| m.name == name) {
            let old = self.marks.remove(i);
            self.retired.extend(old.mark);
        }
        self.marks.push(named);
    }

    fn position_injected(&self) -> usize {
        let typed = self.acts.iter().filter(|a| matches!(a, Act::Inject(_))).count();
        self.replayer.position().0 + typed
    }

    fn rewind(&mut self, rt: &Runtime, name: Option<&str>, by_replay: bool, out: &mut Reply) {
        let Some(i) = (match name {
            Some(n) => self.marks.iter().position(|m| m.name == n),
            None => self.marks.len().checked_sub(1),
        }) else {
            return out.fail(match name {
                Some(n) => format!("no checkpoint {n:?} (`checkpoints` lists them)"),
                None => "no checkpoint yet (`checkpoint [NAME]` takes one)".into(),
            });
        };
        if let Some(short) = descriptors_short(REWIND_MARGIN) {
            return out.fail(format!("cannot rewind: {short}"));
        }
        let started = Instant::now();
        let how = if let (Some(mark), false) = (self.marks[i].mark.as_mut(), by_replay) {
            match rt.block_on(self.replayer.rewind(mark)) {
                Ok(()) => "from the controllers' checkpoints",
                Err(e) => return out.fail(format!("rewind: {e}")),
            }
        } else {
            if let Err(e) = self.replay_to(rt, i) {
                return out.fail(format!("rewind by replaying: {e}"));
            }
            "by replaying the session from the start"
        };
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        let m = &self.marks[i];
        self.acts = m.acts.clone();
        self.msg_from = self.replayer.session().runner.interposer.seen();
        out.say(format!("rewound to {} ({} ms, after {} inputs) {how}, in {ms:.1} ms", m.name, m.at_ms, m.injected));
        out.set("took_ms", json!((ms * 10.0).round() / 10.0));
        out.set("by_replay", json!(how.starts_with("by replaying")));
        // Message breakpoints set since the checkpoint hold again.
        let rules = self.replayer.session().runner.interposer.rules();
        let holds: Vec<External> = self
            .msg_breaks()
            .into_iter()
            .filter(|(t, d)| {
                !rules.iter().any(|r| {
                    r.action == sts_proxy::interpose::Action::Hold
                        && r.dpid == *d
                        && r.msg_type.as_deref() == Some(t.as_str())
                })
            })
            .map(|(msg_type, switch)| External::ControlHold { switch, msg_type })
            .collect();
        for e in holds {
            self.inject(rt, e, out);
        }
        self.say_upcoming(out);
    }

    /// Starts the run afresh and does the session's acts again up to
    /// checkpoint `i`.
    fn replay_to(&mut self, rt: &Runtime, i: usize) -> Result<(), RunError> {
        self.rewinds_by_replay += 1;
        let dir = self.out.join(format!("rewind-{}", self.rewinds_by_replay));
        let _ = std::fs::remove_dir_all(&dir);
        let (acts, at_ms) = (self.marks[i].acts.clone(), self.marks[i].at_ms);
        let fresh = rt.block_on(Replayer::start(self.engine, &self.config, self.trace, &dir, self.run))?;
        self.engine.progress(sts_engine::Progress::Done);
        let old = std::mem::replace(&mut self.replayer, fresh);
        drop(old);
        for act in acts {
            match act {
                Act::Step => {
                    rt.block_on(self.replayer.step())?;
                }
                Act::RunTo(t) => {
                    let now = self.now();
                    if t > now {
                        rt.block_on(self.replayer.run_for(t - now))?;
                    }
                }
                Act::Inject(e) => {
                    rt.block_on(self.replayer.inject(&e))?;
                }
                Act::Skip => {
                    self.replayer.skip();
                }
            }
        }
        let now = self.now();
        if at_ms > now {
            rt.block_on(self.replayer.run_for(at_ms - now))?;
        }
        // The other checkpoints belong to the run just ended (its clock,
        // its controllers): rewinding to them replays from now on. This one
        // is taken again in the new run, if it can be.
        self.retired.clear();
        for m in &mut self.marks {
            m.mark = None;
        }
        self.marks[i].mark = rt.block_on(self.replayer.checkpoint()).ok();
        if let Some(m) = &self.marks[i].mark {
            self.marks[i].at_ms = m.at_ms;
        }
        Ok(())
    }

    fn export_pcap(&mut self, file: &Path, out: &mut Reply) {
        if let Err(e) = self.replayer.flush() {
            return out.fail(format!("export: {e}"));
        }
        let written = sts_trace::Trace::load(self.replayer.trace_path()).map_err(|e| e.to_string()).and_then(|t| {
            std::fs::File::create(file)
                .map(std::io::BufWriter::new)
                .and_then(|w| sts_report::pcap::write_trace(&t, w))
                .and_then(|(n, mut w)| std::io::Write::flush(&mut w).map(|()| n))
                .map_err(|e| format!("{}: {e}", file.display()))
        });
        match written {
            Ok(w) => out.say(format!(
                "{} OpenFlow messages in {} connections: {}",
                w.messages,
                w.connections,
                file.display()
            )),
            Err(e) => out.fail(format!("export: {e}")),
        }
    }

    fn where_(&self, out: &mut Reply) {
        let (next, total) = self.replayer.position();
        let now = self.now();
        if self.live {
            out.say(format!("live session at {now} ms; {} inputs typed", self.position_injected()));
        } else {
            out.say(format!("input {next} of {total} injected; virtual time {now} ms"));
            match self.replayer.upcoming_as_now() {
                Some(e) => out.say(format!("next: {}", e.describe())),
                None => out.say("next: nothing (every input injected)"),
            }
        }
        let held = self.replayer.session().runner.interposer.queued();
        if held > 0 {
            out.say(format!("{held} messages held or delayed (`pending`)"));
        }
        for v in self.replayer.current_violations() {
            out.say(format!("violated at the last check: {v}"));
        }
        out.set("position", json!(next));
        out.set("inputs", json!(total));
        out.set("time_ms", json!(now));
        out.set("next", json!(self.replayer.upcoming_as_now().map(|e| e.describe())));
        out.set("violations", json!(self.replayer.current_violations()));
    }

    /// Where the replay stands: inputs injected, the next one.
    fn say_upcoming(&self, out: &mut Reply) {
        let (next, total) = self.replayer.position();
        match (self.replayer.upcoming_as_now(), self.replayer.upcoming_seq()) {
            (Some(e), Some(seq)) => {
                out.say(format!("input {next} of {total} injected; next: {} (seq {seq})", e.describe()))
            }
            _ if self.live => out.say(format!("at {} ms", self.now())),
            _ => out.say("every input injected"),
        }
    }

    fn say_step(&self, step: &Step, out: &mut Reply) {
        let r = &self.replayer;
        match step {
            Step::Injected { index, seq } => {
                let (_, total) = r.position();
                let what = r.last_input().or(r.injected_input(*index)).map_or_else(String::new, |e| e.describe());
                out.say(format!("input {} of {total} (seq {seq}) at {} ms: {what}", index + 1, self.now()));
            }
            Step::Reproduced => match r.violation() {
                Some(v) => out.say(format!("the violation showed up:\n{}", sts_report::violation(v))),
                None => out.say("the violation showed up"),
            },
            Step::End => out.say("every input injected; `continue` waits for the violation, `quit` ends"),
            Step::Paused => out.say("paused"),
        }
    }
}

/// Descriptors a new checkpoint leaves free: enough to rewind to every
/// checkpoint taken (the switches' new connections, the copies' control
/// sockets) and to go on.
const CHECKPOINT_MARGIN: usize = 64;
/// Descriptors a rewind needs free.
const REWIND_MARGIN: usize = 16;

/// Why there are too few file descriptors left to take a checkpoint or
/// rewind safely (each checkpoint keeps descriptors open), or None.
fn descriptors_short(margin: usize) -> Option<String> {
    let used = std::fs::read_dir("/proc/self/fd").ok()?.count();
    let (soft, _) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok()?;
    let limit = usize::try_from(soft).unwrap_or(usize::MAX);
    (used + margin > limit).then(|| {
        format!(
            "{used} of this process's {limit} file descriptors are in use (checkpoints keep theirs open); \
             take fewer checkpoints, or raise the limit (`ulimit -n`) and start again"
        )
    })
}

/// The most a script (a file or a pipe) may hold.
const MAX_SCRIPT: u64 = 16 << 20;

/// A whole script: UTF-8 text of at most [`MAX_SCRIPT`] bytes, or bad input
/// saying which it is not (never an empty script in silence).
fn read_script(reader: impl std::io::Read, what: &str) -> Result<String, RunError> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut reader.take(MAX_SCRIPT + 1), &mut bytes)
        .map_err(|e| RunError::BadInput(format!("{what}: {e}")))?;
    if bytes.len() as u64 > MAX_SCRIPT {
        return Err(RunError::BadInput(format!("{what}: a script of more than {} MiB", MAX_SCRIPT >> 20)));
    }
    sts_engine::config::utf8_text(bytes).map_err(|e| RunError::BadInput(format!("{what}: {e}")))
}

fn fail_msg(mut out: Reply, m: impl AsRef<str>) -> Reply {
    out.fail(m);
    out
}

fn fail(mut out: Reply, e: RunError) -> Reply {
    out.fail(format!("error: {e}"));
    out
}

/// Whether the replay, between two inputs, stands where `b` stops.
fn hits(b: &Break, r: &Replayer<'_>) -> bool {
    match b {
        Break::Seq(n) => r.upcoming_seq() == Some(*n),
        Break::Event(t) => {
            r.upcoming().and_then(|e| serde_json::to_value(e).ok()).is_some_and(|v| v["type"] == t.as_str())
        }
        Break::Invariant(kind) => {
            r.current_violations().iter().any(|v| kind.as_deref().is_none_or(|k| v.starts_with(k)))
        }
        // Message breakpoints pause the run from inside (`Console::arm`).
        Break::Msg { .. } => false,
    }
}

/// The first message held since interposer count `from` that a message
/// breakpoint in `msgs` selects: (its id, its switch, its type).
fn new_held(
    s: &sts_engine::session::Session,
    from: u64,
    msgs: &[(MsgType, Option<u64>)],
) -> Option<(u64, u64, MsgType)> {
    s.runner
        .interposer
        .waiting()
        .into_iter()
        .find(|w| {
            w.seq >= from
                && w.due.is_none()
                && msgs.iter().any(|(t, d)| *t == w.msg_type && d.is_none_or(|d| d == w.channel.dpid))
        })
        .map(|w| (w.seq, w.channel.dpid, MsgType::recorded(w.msg_type)))
}
