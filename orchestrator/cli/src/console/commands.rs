//! The console's commands: their table (for `help` and completion), and the
//! parsing of the ones that take structured arguments (breakpoints, typed
//! inputs, times). No I/O here: these are tested on their own.

use sts_mocknet::network::{Endpoint, Network};
use sts_trace::{External, MsgType, Port};

/// A command's name, its arguments, what it does, its group in `help`, and
/// what its arguments are completed from: everything the console knows of a
/// command but how it runs (one `match` in `mod.rs`).
pub struct Command {
    pub name: &'static str,
    pub args: &'static str,
    pub what: &'static str,
    pub group: &'static str,
    pub completes: &'static [Word],
}

/// Where a command's argument words come from, for completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Word {
    /// This word itself (`down`, `--stats` ...).
    Literal(&'static str),
    Switches,
    Hosts,
    Controllers,
    /// The checkpoints' names.
    Checkpoints,
    /// The held messages' ids, and `all`.
    Held,
    Relays,
    Policies,
    /// Common OpenFlow message types (`flow_mod`, `packet_in` ...).
    MsgTypes,
    /// Every command's name.
    Commands,
}

const fn c(group: &'static str, name: &'static str, args: &'static str, what: &'static str) -> Command {
    Command { name, args, what, group, completes: &[] }
}

impl Command {
    const fn completing(self, completes: &'static [Word]) -> Command {
        Command { completes, ..self }
    }
}

/// What the running session names, for [`completions`].
#[derive(Debug, Default)]
pub struct Names {
    pub switches: Vec<String>,
    pub hosts: Vec<String>,
    pub controllers: Vec<String>,
    pub checkpoints: Vec<String>,
    pub held: Vec<String>,
    pub relays: Vec<String>,
    pub policies: Vec<String>,
}

/// The words that complete `command`'s arguments, from what the session names.
pub fn completions(command: &Command, names: &Names) -> Vec<String> {
    const MSG_TYPES: [&str; 6] = ["flow_mod", "packet_in", "packet_out", "port_status", "barrier_request", "group_mod"];
    let mut out = Vec::new();
    for w in command.completes {
        match w {
            Word::Literal(l) => out.push(l.to_string()),
            Word::Switches => out.extend(names.switches.iter().cloned()),
            Word::Hosts => out.extend(names.hosts.iter().cloned()),
            Word::Controllers => out.extend(names.controllers.iter().cloned()),
            Word::Checkpoints => out.extend(names.checkpoints.iter().cloned()),
            Word::Held => out.extend(names.held.iter().cloned().chain(["all".to_string()])),
            Word::Relays => out.extend(names.relays.iter().cloned()),
            Word::Policies => out.extend(names.policies.iter().cloned()),
            Word::MsgTypes => out.extend(MSG_TYPES.iter().map(|t| t.to_string())),
            Word::Commands => out.extend(COMMANDS.iter().map(|c| c.name.to_string())),
        }
    }
    out
}

/// `help`'s text: every command by group, then the aliases.
pub fn help_lines() -> Vec<String> {
    let mut out = Vec::new();
    let mut group = "";
    for c in COMMANDS {
        if c.group != group {
            group = c.group;
            out.push(format!("{group}:"));
        }
        // Arguments too long for their column get a line of their own.
        if c.args.len() < 22 {
            out.push(format!("  {:<12}{:<22}{}", c.name, c.args, c.what));
        } else {
            out.push(format!("  {:<12}{}", c.name, c.args));
            out.push(format!("  {:<34}{}", "", c.what));
        }
    }
    let aliases: Vec<String> = ALIASES.iter().map(|(a, n)| format!("{a} {n}")).collect();
    out.push(format!("aliases: {}", aliases.join(", ")));
    out.push("Mininet's phrasing works too: h1 ping h2, net, dump, link s1 s2 down, dpctl dump-flows".into());
    out
}

/// Every command, in the order `help` lists them.
pub const COMMANDS: &[Command] = &[
    c("stepping", "next", "[N]", "inject the trace's next N inputs (default 1), each once what preceded it in the original has happened, as a replay does (Enter at the prompt does `next`)"),
    c("stepping", "continue", "", "inject the trace's inputs until a breakpoint, the violation or Ctrl-C (past the last input, wait for the violation as a replay does)"),
    c("stepping", "run-to", "SEQ|TIME|violation", "inject inputs until just before the one with trace seq SEQ, or until the violation; or run until TIME on the run's clock (2.5s, 800ms; +1s: from now), injecting the inputs that come due on the way").completing(&[Word::Literal("violation"), Word::Literal("+1s")]),
    c("stepping", "skip", "[N]", "pass over the trace's next N inputs (default 1) without injecting them; the ones after keep their spacing"),
    c("stepping", "instead", "INPUT ...", "a typed input in place of the trace's next one: `instead migrate h3 s2` skips the next input and migrates h3 (typed inputs alone go in before it)"),
    c("stepping", "where", "", "position in the trace, virtual time, the next input, held messages, violations at the last check"),
    c("breakpoints", "break", "seq N|event TYPE|msg TYPE [SWITCH]|invariant [KIND]", "stop `continue` before input seq N, before the next input of TYPE (ping, host_migrate ...), when a message of TYPE (flow_mod ...) to or from SWITCH is sent (it is held: `pending`), or once a check finds a violation (of KIND: loop, blackhole ...)").completing(&[Word::Literal("seq"), Word::Literal("event"), Word::Literal("msg"), Word::Literal("invariant"), Word::MsgTypes, Word::Switches]),
    c("breakpoints", "breaks", "", "list the breakpoints"),
    c("breakpoints", "delete", "N", "delete breakpoint N (a message breakpoint releases what it held)"),
    c("network", "nodes", "", "switches, hosts and controllers"),
    c("network", "links", "", "switch-to-switch and host links, up or down"),
    c("network", "hosts", "", "hosts: address, where plugged in, pings answered"),
    c("network", "ports", "[SWITCH]", "ports of every switch, or one: number, name, link, counters").completing(&[Word::Switches, Word::Literal("--stats")]),
    c("network", "flows", "[SWITCH] [--stats]", "flow tables as ovs-ofctl dump-flows --no-stats prints them (every switch, or one: s3); --stats: as dump-flows does, with duration and counters").completing(&[Word::Switches, Word::Literal("--stats")]),
    c("network", "groups", "[SWITCH]", "group tables: id, type, buckets").completing(&[Word::Switches, Word::Literal("--stats")]),
    c("network", "path", "SRC DST", "where a ping from host SRC to host DST goes through the flow tables now: each switch, the rule it meets (dump-flows style), and where it ends").completing(&[Word::Hosts]),
    c("network", "check", "[KIND]", "run the invariant checker now; the violations (of KIND) with witness and culprit"),
    c("messages", "pending", "", "OpenFlow messages the proxy holds or delays, with their ids"),
    c("messages", "deliver", "ID|all", "deliver held message ID (or every held message) now, out of turn (recorded as an input)").completing(&[Word::Held]),
    c("messages", "drop", "ID|all", "drop held message ID (or every held message) (recorded as an input)").completing(&[Word::Held]),
    c("messages", "delay", "ID|all MS", "deliver held message ID (or every held message) in MS milliseconds (recorded as an input)").completing(&[Word::Held]),
    c("messages", "hold", "TYPE [SWITCH]", "hold messages of TYPE (flow_mod, packet_in ...) to or from SWITCH, or every switch, from now on (recorded as an input); later messages on a connection wait behind a held one").completing(&[Word::MsgTypes, Word::Switches]),
    c("messages", "release", "[SWITCH]", "stop holding (for SWITCH, or everywhere) and deliver what is held, in order (recorded as an input)").completing(&[Word::Switches]),
    c("inputs", "link", "down|up A B", "a switch-to-switch link fails or recovers (A, B: s1 s2)").completing(&[Word::Literal("down"), Word::Literal("up"), Word::Switches]),
    c("inputs", "switch", "down|up S", "a switch fails or recovers").completing(&[Word::Literal("down"), Word::Literal("up"), Word::Switches]),
    c("inputs", "controller", "crash|restart C", "a controller (c0 ...) is killed, or started again").completing(&[Word::Literal("crash"), Word::Literal("restart"), Word::Controllers]),
    c("inputs", "migrate", "HOST SWITCH", "a host moves to a free port of SWITCH").completing(&[Word::Hosts, Word::Switches]),
    c("inputs", "ping", "SRC DST", "SRC pings DST (say `run-to +1s` to let it go)").completing(&[Word::Hosts]),
    c("inputs", "pingall", "", "every host pings every other, one pair at a time (each until answered or 1 s), and says which were answered"),
    c("inputs", "partition", "RELAY", "cut a controller-to-controller relay").completing(&[Word::Relays]),
    c("inputs", "heal", "RELAY", "heal a cut relay").completing(&[Word::Relays]),
    c("inputs", "policy", "NAME", "apply the config's policy change NAME ([[policies]]: a REST call or a command)").completing(&[Word::Policies]),
    c("time travel", "checkpoint", "[NAME]", "remember this point: every controller (forked and parked), the network, the held messages, the trace so far").completing(&[Word::Checkpoints]),
    c("time travel", "rewind", "[--replay] [NAME]", "go back to checkpoint NAME (the latest by default); --replay: by replaying the session up to it instead, as when checkpoints cannot be taken").completing(&[Word::Checkpoints, Word::Literal("--replay")]),
    c("time travel", "checkpoints", "", "list the checkpoints"),
    c("output", "log", "[N]", "the last N events of this session's trace (default 10)"),
    c("output", "save", "DIR", "the session so far as a new experiment directory that `sts replay` and `sts minimize` accept"),
    c("output", "export", "pcap FILE", "this session's OpenFlow messages as a pcapng (as `sts pcap` writes)").completing(&[Word::Literal("pcap")]),
    c("output", "help", "[COMMAND]", "this list, or one command").completing(&[Word::Commands]),
    c("output", "quit", "", "end the session (Ctrl-D too); its trace stays"),
];

/// One-letter aliases, as `help` lists them.
pub const ALIASES: &[(&str, &str)] = &[
    ("n", "next"),
    ("c", "continue"),
    ("w", "where"),
    ("b", "break"),
    ("q", "quit"),
    ("h", "help"),
    ("p", "pending"),
    ("f", "flows"),
    ("l", "log"),
];

/// The command `word` names: its full name, or a one-letter alias that is
/// unambiguous (`n` next, `c` continue, `w` where ...).
pub fn resolve(word: &str) -> Option<&'static Command> {
    let name = ALIASES.iter().find(|(a, _)| *a == word).map_or(word, |(_, n)| n);
    COMMANDS.iter().find(|c| c.name == name)
}

/// A line as a Mininet user types it, in this console's words: `h1 ping
/// h2` (`-c N` ignored), `net` (links), `dump` (nodes), `link s1 s2 down`,
/// `dpctl dump-flows` and `sh ovs-ofctl dump-flows s1` (flows). `None` when
/// the line is not one of those. `hosts` are the network's host names.
pub fn mininet(words: &[&str], hosts: &[String]) -> Option<Vec<String>> {
    let own = |v: &[&str]| Some(v.iter().map(|w| w.to_string()).collect());
    let is_host = |w: &str| hosts.iter().any(|h| h == w);
    match words {
        [a, "ping", rest @ ..] if is_host(a) => {
            // Mininet's `h1 ping -c 1 h2`: the count is the console's one ping.
            let dst: Vec<&str> =
                rest.iter().copied().filter(|w| !w.starts_with('-') && w.parse::<u32>().is_err()).collect();
            match dst.as_slice() {
                [b] => own(&["ping", a, b]),
                _ => None,
            }
        }
        ["net"] => own(&["links"]),
        ["dump"] => own(&["nodes"]),
        ["link", a, b, state @ ("up" | "down")] => own(&["link", state, a, b]),
        ["dpctl", "dump-flows", rest @ ..] | ["sh", "ovs-ofctl", "dump-flows", rest @ ..] if rest.len() <= 1 => {
            let mut v = vec!["flows"];
            v.extend(rest);
            own(&v)
        }
        _ => None,
    }
}

/// The command a mistyped `word` most likely meant, if one is close.
pub fn did_you_mean(word: &str) -> Option<&'static str> {
    COMMANDS
        .iter()
        .map(|c| (strsim::damerau_levenshtein(word, c.name), c.name))
        .filter(|&(d, name)| d <= 2.min(name.len() / 2).max(1))
        .min()
        .map(|(_, name)| name)
}

/// Where `continue` stops.
#[derive(Debug, Clone, PartialEq)]
pub enum Break {
    /// Before the input with this trace `seq`.
    Seq(u64),
    /// Before the next input of this type (`ping`, `host_migrate` ...).
    Event(String),
    /// When a message of this type (to or from this switch) is sent: it is
    /// held there.
    Msg { msg_type: MsgType, switch: Option<u64> },
    /// Once a check finds a violation (of this kind, if given).
    Invariant(Option<String>),
}

impl Break {
    pub fn parse(args: &[&str]) -> Result<Break, String> {
        match args {
            ["seq", n] => n.parse().map(Break::Seq).map_err(|_| format!("break seq N: {n:?} is not a number")),
            ["event", t] => Ok(Break::Event(t.to_string())),
            ["msg", t] => Ok(Break::Msg { msg_type: msg_type(t)?, switch: None }),
            ["msg", t, s] => Ok(Break::Msg { msg_type: msg_type(t)?, switch: Some(switch_id(s)?) }),
            ["invariant"] => Ok(Break::Invariant(None)),
            ["invariant", k] => Ok(Break::Invariant(Some(k.to_string()))),
            _ => Err("break seq N | event TYPE | msg TYPE [SWITCH] | invariant [KIND]".into()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Break::Seq(n) => format!("before input seq {n}"),
            Break::Event(t) => format!("before the next {t} input"),
            Break::Msg { msg_type, switch: Some(d) } => format!("when a {msg_type} message of s{d} is sent (held)"),
            Break::Msg { msg_type, switch: None } => format!("when a {msg_type} message is sent (held)"),
            Break::Invariant(None) => "when a check finds a violation".into(),
            Break::Invariant(Some(k)) => format!("when a check finds a {k} violation"),
        }
    }
}

/// `s3` or `3` as a datapath id.
/// An OpenFlow message type an input can name (`flow_mod`), as the engine
/// checks it.
pub fn msg_type(word: &str) -> Result<MsgType, String> {
    sts_engine::inputs::msg_type(word).map_err(|e| e.to_string())
}

pub fn switch_id(word: &str) -> Result<u64, String> {
    word.trim_start_matches('s').parse().map_err(|_| format!("{word:?} is not a switch (s1, s2 ...)"))
}

/// A time on the run's clock: `2.5s`, `800ms`; with `+`, from `now`.
pub fn time_ms(word: &str, now: u64) -> Option<u64> {
    let (relative, rest) = match word.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, word),
    };
    let ms = if let Some(n) = rest.strip_suffix("ms") {
        n.parse::<u64>().ok()?
    } else if let Some(n) = rest.strip_suffix('s') {
        let secs = n.parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0 && *s < 1e9)?;
        (secs * 1000.0).round() as u64
    } else {
        return None;
    };
    Some(if relative { now + ms } else { ms })
}

fn host(net: &Network, name: &str) -> Result<usize, String> {
    net.hosts.iter().position(|h| h.name == name).ok_or_else(|| {
        let names: Vec<&str> = net.hosts.iter().map(|h| h.name.as_str()).collect();
        format!("no host {name:?} (hosts: {})", names.join(" "))
    })
}

/// The switch a host is plugged into now.
pub fn host_switch(net: &Network, i: usize) -> Option<u64> {
    match net.live_peer(Endpoint::Host(i)) {
        Some(Endpoint::Switch { dpid, .. }) => Some(dpid),
        _ => None,
    }
}

/// The link between switches `a` and `b` (`s1 s2`), or a port pair given
/// as `s1:2 s2:3`.
fn link(net: &Network, a: &str, b: &str) -> Result<(Port, Port), String> {
    let end = |w: &str| -> Result<(u64, Option<u32>), String> {
        match w.split_once(':') {
            Some((s, p)) => Ok((switch_id(s)?, Some(p.parse().map_err(|_| format!("{w:?}: bad port"))?))),
            None => Ok((switch_id(w)?, None)),
        }
    };
    let ((da, pa), (db, pb)) = (end(a)?, end(b)?);
    let fits = |d: u64, p: Option<u32>, (sd, sp): (u64, u32)| d == sd && p.is_none_or(|p| p == sp);
    for (x, y) in net.switch_links() {
        for ((sa, sp), (ta, tp)) in [(x, y), (y, x)] {
            if fits(da, pa, (sa, sp)) && fits(db, pb, (ta, tp)) {
                return Ok((Port { switch: sa, port: sp }, Port { switch: ta, port: tp }));
            }
        }
    }
    Err(format!("no link between {a} and {b} (`links` lists them)"))
}

/// A typed input (`link down s1 s2`, `migrate h3 s1`, `ping h1 h2` ...) as
/// the external event it records; `None` when `cmd` is not an input command.
pub fn input(net: &Network, cmd: &str, args: &[&str]) -> Option<Result<External, String>> {
    let usage = |u: &str| Err(format!("usage: {cmd} {u}"));
    Some(match (cmd, args) {
        ("link", [way @ ("down" | "up"), a, b]) => {
            link(net, a, b).map(
                |(a, b)| {
                    if *way == "down" {
                        External::LinkDown { a, b }
                    } else {
                        External::LinkUp { a, b }
                    }
                },
            )
        }
        ("link", _) => usage("down|up A B"),
        ("switch", [way @ ("down" | "up"), s]) => switch_id(s).map(|switch| {
            if *way == "down" {
                External::SwitchDown { switch }
            } else {
                External::SwitchUp { switch }
            }
        }),
        ("switch", _) => usage("down|up S"),
        ("controller", [way @ ("crash" | "restart"), name]) => Ok(if *way == "crash" {
            External::ControllerCrash { controller: name.to_string() }
        } else {
            External::ControllerRestart { controller: name.to_string() }
        }),
        ("controller", _) => usage("crash|restart C"),
        ("migrate", [h, s]) => (|| {
            let i = host(net, h)?;
            let to = switch_id(s)?;
            let from = host_switch(net, i).ok_or_else(|| format!("{h} is not plugged in"))?;
            Ok(External::HostMigrate { host: h.to_string(), from, to })
        })(),
        ("migrate", _) => usage("HOST SWITCH"),
        ("ping", [a, b]) => {
            host(net, a).and_then(|_| host(net, b)).map(|_| External::Ping { src: a.to_string(), dst: b.to_string() })
        }
        ("ping", _) => usage("SRC DST"),
        ("partition", [r]) => Ok(External::Partition { relay: r.to_string() }),
        ("heal", [r]) => Ok(External::PartitionHeal { relay: r.to_string() }),
        ("partition" | "heal", _) => usage("RELAY"),
        ("policy", [name]) => Ok(External::Policy { name: name.to_string(), controller: None }),
        ("policy", _) => usage("NAME"),
        ("hold", [t]) => msg_type(t).map(|msg_type| External::ControlHold { switch: None, msg_type }),
        ("hold", [t, s]) => {
            msg_type(t).and_then(|msg_type| switch_id(s).map(|d| External::ControlHold { switch: Some(d), msg_type }))
        }
        ("hold", _) => usage("TYPE [SWITCH]"),
        ("release", []) => Ok(External::ControlRelease { switch: None }),
        ("release", [s]) => switch_id(s).map(|d| External::ControlRelease { switch: Some(d) }),
        ("release", _) => usage("[SWITCH]"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_mocknet::topology::Topology;

    fn linear3() -> Network {
        Network::new(&Topology::linear(3), 4)
    }

    #[test]
    fn mininet_phrasing_reads_as_the_consoles_own() {
        let hosts: Vec<String> = ["h1", "h2", "h3"].iter().map(|h| h.to_string()).collect();
        let m = |line: &str| mininet(&line.split_whitespace().collect::<Vec<_>>(), &hosts).map(|v| v.join(" "));
        assert_eq!(m("h1 ping h2").as_deref(), Some("ping h1 h2"));
        assert_eq!(m("h1 ping -c 1 h2").as_deref(), Some("ping h1 h2"));
        assert_eq!(m("net").as_deref(), Some("links"));
        assert_eq!(m("dump").as_deref(), Some("nodes"));
        assert_eq!(m("link s1 s2 down").as_deref(), Some("link down s1 s2"));
        assert_eq!(m("dpctl dump-flows").as_deref(), Some("flows"));
        assert_eq!(m("sh ovs-ofctl dump-flows s1").as_deref(), Some("flows s1"));
        assert_eq!(m("h9 ping h2"), None, "not a host");
        assert_eq!(m("ping h1 h2"), None, "already the console's");
        assert_eq!(did_you_mean("chekpoint"), Some("checkpoint"));
        assert_eq!(did_you_mean("flow"), Some("flows"));
        assert_eq!(did_you_mean("xyzzy"), None);
    }

    #[test]
    fn every_command_resolves_and_aliases_are_unambiguous() {
        for cmd in COMMANDS {
            assert_eq!(resolve(cmd.name).map(|c| c.name), Some(cmd.name));
        }
        assert_eq!(resolve("n").map(|c| c.name), Some("next"));
        assert_eq!(resolve("c").map(|c| c.name), Some("continue"));
        assert!(resolve("nope").is_none());
    }

    #[test]
    fn arguments_complete_from_the_table_and_what_the_session_names() {
        let names = Names {
            switches: vec!["s1".into(), "s2".into()],
            hosts: vec!["h1".into()],
            held: vec!["41".into()],
            ..Names::default()
        };
        let of = |name: &str| completions(resolve(name).unwrap(), &names);
        assert_eq!(of("link"), ["down", "up", "s1", "s2"]);
        assert_eq!(of("drop"), ["41", "all"]);
        assert_eq!(of("migrate"), ["h1", "s1", "s2"]);
        assert!(of("where").is_empty());
        assert_eq!(of("help").len(), COMMANDS.len());
        let help = help_lines();
        assert!(COMMANDS.iter().all(|c| help.iter().any(|l| l.starts_with(&format!("  {:<12}", c.name)))));
    }

    #[test]
    fn typed_inputs_become_the_events_they_name() {
        let net = linear3();
        let down = input(&net, "link", &["down", "s1", "s2"]).unwrap().unwrap();
        let External::LinkDown { a, b } = down else { panic!("{down:?}") };
        assert_eq!((a.switch, b.switch), (1, 2));
        // Either order, and by port.
        let up = input(&net, "link", &["up", &format!("s2:{}", b.port), "s1"]).unwrap().unwrap();
        assert!(matches!(up, External::LinkUp { a: x, b: y } if x.switch == 2 && y.switch == 1), "{up:?}");
        assert!(input(&net, "link", &["down", "s1", "s3"]).unwrap().unwrap_err().contains("no link"));
        assert_eq!(
            input(&net, "migrate", &["h3", "s1"]).unwrap().unwrap(),
            External::HostMigrate { host: "h3".into(), from: 3, to: 1 }
        );
        assert!(input(&net, "ping", &["h1", "h9"]).unwrap().unwrap_err().contains("no host \"h9\""));
        assert_eq!(input(&net, "switch", &["down", "s2"]).unwrap().unwrap(), External::SwitchDown { switch: 2 });
        assert!(input(&net, "switch", &["sideways", "s2"]).unwrap().unwrap_err().starts_with("usage"));
        assert_eq!(
            input(&net, "hold", &["flow_mod", "s3"]).unwrap().unwrap(),
            External::ControlHold { switch: Some(3), msg_type: MsgType::from_name("flow_mod").unwrap() }
        );
        assert!(input(&net, "where", &[]).is_none());
    }

    #[test]
    fn times_and_breakpoints_parse() {
        assert_eq!(time_ms("2.5s", 100), Some(2500));
        assert_eq!(time_ms("+800ms", 100), Some(900));
        assert_eq!(time_ms("12", 0), None);
        assert_eq!(time_ms("-1s", 0), None);
        assert_eq!(
            Break::parse(&["msg", "flow_mod", "s3"]),
            Ok(Break::Msg { msg_type: MsgType::from_name("flow_mod").unwrap(), switch: Some(3) })
        );
        assert!(Break::parse(&["seq", "x"]).is_err());
        assert!(Break::parse(&[]).is_err());
    }
}
