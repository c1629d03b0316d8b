//! What the console shows of the running system: nodes, links, hosts,
//! ports, flow and group tables, held messages, the trace's recent events.
//! Each view writes lines into a [`Reply`] (printed as text, or as one JSON
//! object with `--json`).

use serde_json::{json, Map, Value};
use sts_engine::monitor;
use sts_engine::session::Session;
use sts_mocknet::network::Endpoint;
use sts_proxy::interpose::Direction;

/// Most characters of a command or an error a reply quotes (head and tail kept).
pub const MAX_QUOTED: usize = 400;

/// What one command answered: its lines, whether it did what was asked,
/// and structured fields for `--json`.
#[derive(Debug)]
pub struct Reply {
    pub ok: bool,
    pub lines: Vec<String>,
    pub data: Map<String, Value>,
}

impl Reply {
    pub fn new() -> Reply {
        Reply { ok: true, lines: Vec::new(), data: Map::new() }
    }

    /// Adds a line (or several, split at newlines).
    pub fn say(&mut self, text: impl AsRef<str>) {
        self.lines.extend(text.as_ref().lines().map(str::to_string));
    }

    /// Adds an error line: the command did not do what was asked. Bounded
    /// (an error quoting a 10 MB line must not answer with 10 MB).
    pub fn fail(&mut self, text: impl AsRef<str>) {
        self.ok = false;
        self.say(sts_trace::bounded_message(text.as_ref().to_string(), MAX_QUOTED));
    }

    pub fn set(&mut self, key: &str, value: Value) {
        self.data.insert(key.to_string(), value);
    }

    /// Prints the reply: its lines, or one JSON object for `command`.
    pub fn print(self, command: &str, as_json: bool) {
        if as_json {
            let mut obj = Map::new();
            obj.insert("command".into(), json!(sts_trace::bounded_message(command.to_string(), MAX_QUOTED)));
            obj.insert("ok".into(), json!(self.ok));
            obj.insert("output".into(), json!(self.lines));
            obj.extend(self.data);
            outln!("{}", Value::Object(obj));
        } else {
            for l in self.lines {
                outln!("{l}");
            }
        }
    }
}

pub fn nodes(s: &Session, out: &mut Reply) {
    let net = &s.runner.net;
    let down = s.runner.disconnected();
    for (dpid, sw) in &net.switches {
        let state = if down.contains(dpid) { "no controller connection" } else { "connected" };
        out.say(format!(
            "s{dpid}: OpenFlow {:#x}, {} ports, {} flows, {state}",
            sw.version,
            sw.ports.len(),
            sw.flow_count()
        ));
    }
    for h in &net.hosts {
        out.say(format!("{}: {} {}", h.name, h.ip, h.mac));
    }
    for i in 0..s.controllers.len() {
        let state = if s.crashed.contains(&i) { "crashed" } else { "running" };
        out.say(format!("{}: {state}", monitor::controller_name(i)));
    }
}

pub fn links(s: &Session, out: &mut Reply) {
    let net = &s.runner.net;
    for ((a, pa), (b, pb)) in net.switch_links() {
        let up = net.live_peer(Endpoint::Switch { dpid: a, port: pa }).is_some();
        out.say(format!("s{a}:{pa} - s{b}:{pb} {}", if up { "up" } else { "down" }));
    }
    for (i, h) in net.hosts.iter().enumerate() {
        match net.live_peer(Endpoint::Host(i)) {
            Some(Endpoint::Switch { dpid, port }) => out.say(format!("{} - s{dpid}:{port} up", h.name)),
            _ => out.say(format!("{} unplugged", h.name)),
        }
    }
}

pub fn hosts(s: &Session, out: &mut Reply) {
    let net = &s.runner.net;
    for (i, h) in net.hosts.iter().enumerate() {
        let at = match net.live_peer(Endpoint::Host(i)) {
            Some(Endpoint::Switch { dpid, port }) => format!("s{dpid}:{port}"),
            _ => "unplugged".into(),
        };
        out.say(format!(
            "{}: {} {} at {at}; {} echo replies received, {} frames",
            h.name,
            h.ip,
            h.mac,
            h.echo_replies.len(),
            h.frames_received
        ));
    }
}

/// The switch `word` names, or an error line.
fn one_switch<'s>(s: &'s Session, word: &str, out: &mut Reply) -> Option<(u64, &'s sts_mocknet::switch::Switch)> {
    let found = super::commands::switch_id(word).ok().and_then(|d| s.runner.net.switches.get(&d).map(|sw| (d, sw)));
    if found.is_none() {
        out.fail(format!("no switch {word:?} (switches are s1, s2 ...; `nodes` lists them)"));
    }
    found
}

/// The switches a command is about: `[SWITCH]` given, or all.
fn switches<'s>(s: &'s Session, word: Option<&str>, out: &mut Reply) -> Vec<(u64, &'s sts_mocknet::switch::Switch)> {
    match word {
        Some(w) => one_switch(s, w, out).into_iter().collect(),
        None => s.runner.net.switches.iter().map(|(d, sw)| (*d, sw)).collect(),
    }
}

pub fn flows(s: &Session, word: Option<&str>, stats: bool, out: &mut Reply) {
    let all = word.is_none();
    for (dpid, sw) in switches(s, word, out) {
        if all {
            out.say(format!("s{dpid}:"));
        }
        // As `ovs-ofctl dump-flows` prints them, or with `--no-stats`.
        out.say(sts_report::flows::dump_with(sw, stats.then(|| s.runner.clock.now())));
    }
}

pub fn ports(s: &Session, word: Option<&str>, out: &mut Reply) {
    for (dpid, sw) in switches(s, word, out) {
        for p in sw.ports.values() {
            let peer = s.runner.net.peer(Endpoint::Switch { dpid, port: p.no });
            let to = match peer {
                Some(Endpoint::Switch { dpid, port }) => format!("s{dpid}:{port}"),
                Some(Endpoint::Host(i)) => s.runner.net.hosts.get(i).map_or("a host".into(), |h| h.name.clone()),
                None => "nothing".into(),
            };
            out.say(format!(
                "s{dpid}:{} {} to {to}: link {}, {}; rx {} pkts {} bytes, tx {} pkts {} bytes",
                p.no,
                p.name,
                if p.link_up { "up" } else { "down" },
                if p.is_live() { "live" } else { "not live" },
                p.rx_packets,
                p.rx_bytes,
                p.tx_packets,
                p.tx_bytes
            ));
        }
    }
}

pub fn groups(s: &Session, word: Option<&str>, out: &mut Reply) {
    let mut any = false;
    for (dpid, sw) in switches(s, word, out) {
        for (id, g) in &sw.groups {
            any = true;
            let kind = match g.group_type {
                0 => "all",
                1 => "select",
                2 => "indirect",
                3 => "ff",
                _ => "unknown",
            };
            out.say(format!("s{dpid}: group_id={id},type={kind},{} buckets", g.buckets.len()));
        }
    }
    if !any && out.ok {
        out.say("no groups");
    }
}

/// The messages the proxy holds or delays, with their ids.
pub fn pending(s: &Session, out: &mut Reply) {
    let now = s.runner.clock.now();
    let waiting = s.runner.interposer.waiting();
    if waiting.is_empty() {
        out.say("no messages held or delayed");
    }
    let mut list = Vec::new();
    for w in &waiting {
        let (from, to) = match w.dir {
            Direction::ControllerToSwitch => {
                (monitor::controller_name(w.channel.controller), format!("s{}", w.channel.dpid))
            }
            Direction::SwitchToController => {
                (format!("s{}", w.channel.dpid), monitor::controller_name(w.channel.controller))
            }
        };
        let state = match w.due {
            None => "held".to_string(),
            Some(t) => format!("goes in {} ms", t.saturating_sub(now)),
        };
        let what = match w.frame.decode() {
            Ok(m) => sts_report::flows::message(&m)
                .unwrap_or_else(|| sts_report::shorten(&sts_proxy::wire::Fingerprint::of(&m).0)),
            Err(e) => format!("undecodable: {e}"),
        };
        out.say(format!("{:>5}  {from} -> {to}  {} xid={} {state}: {what}", w.seq, w.msg_type, w.xid));
        list.push(
            json!({"id": w.seq, "from": from, "to": to, "type": w.msg_type, "xid": w.xid, "held": w.due.is_none()}),
        );
    }
    out.set("pending", Value::Array(list));
}

/// The last `n` records of the trace at `path`, described.
pub fn log(path: &std::path::Path, n: usize, out: &mut Reply) {
    let trace = match sts_trace::Trace::load(path) {
        Ok(t) => t,
        Err(e) => return out.fail(format!("cannot read this session's trace: {e}")),
    };
    let skip = trace.records.len().saturating_sub(n);
    if trace.records.is_empty() {
        out.say("nothing recorded yet");
    }
    for r in &trace.records[skip..] {
        let what = if let Some(e) = r.external() {
            format!("input: {}", e.describe())
        } else if let Some(i) = r.internal() {
            internal(i)
        } else if let Some(v) = r.violation() {
            format!("violation: {}", v.summary)
        } else {
            String::new()
        };
        out.say(format!("{:>6} {:>8} ms  {what}", r.seq, r.t_ms));
    }
}

/// One internal event in a line: `s3 -> c0 packet_in: ...`, a log line, a
/// dataplane report.
fn internal(i: &sts_trace::Internal) -> String {
    match i {
        sts_trace::Internal::Openflow { fp, msg, raw, proxy, .. } => {
            let (from, to) = i.sender_receiver().unwrap_or_default();
            let to = match proxy {
                Some(sts_trace::ProxyDecision::Queued) => format!("{to} (queued by the proxy)"),
                Some(sts_trace::ProxyDecision::Dropped) => format!("{to} (dropped by the proxy)"),
                None => to,
            };
            // FLOW_MODs and PACKET_OUTs in dump-flows words, as `pending` shows them.
            let words = raw
                .as_ref()
                .and_then(|r| sts_proxy::wire::Message::parse(r.clone()).ok())
                .and_then(|m| sts_report::flows::message(&m));
            match words {
                Some(w) => format!("{from} -> {to} {msg} {w}"),
                None => format!("{from} -> {to} {}", sts_report::shorten(&fp.0)),
            }
        }
        sts_trace::Internal::Log { controller, line, .. } => format!("{controller} log: {line}"),
        sts_trace::Internal::Dataplane(d) => format!("dataplane: {}", d.describe()),
        sts_trace::Internal::Frame { host, sent, raw } => sts_report::diff::frame_line(host, *sent, raw.as_deref()),
        sts_trace::Internal::Delivered { of } => format!("the proxy delivers the message of seq {of}, queued till now"),
    }
}

/// `path SRC DST`: the ping's walk through the tables, each hop with the
/// rule it met.
pub fn path(s: &Session, src: &str, dst: &str, out: &mut Reply) {
    let net = &s.runner.net;
    let index = |name: &str| net.hosts.iter().position(|h| h.name == name);
    let (Some(a), Some(b)) = (index(src), index(dst)) else {
        let names: Vec<&str> = net.hosts.iter().map(|h| h.name.as_str()).collect();
        return out.fail(format!("path SRC DST: hosts are {}", names.join(" ")));
    };
    if net.live_peer(Endpoint::Host(a)).is_none() {
        return out.fail(format!("{src} is not plugged in"));
    }
    let walks = sts_invariants::check::ping_paths(net, a, b);
    if walks.is_empty() {
        out.say(format!("{src} sends nothing {dst} could receive (no ICMP echo fits)"));
    }
    let mut ends = Vec::new();
    for w in &walks {
        out.say(format!("from {}: {}", w.from, w.header));
        for hop in &w.path {
            out.say(format!("  {hop}"));
            for rule in rules_of(net, hop) {
                out.say(format!("      {rule}"));
            }
        }
        out.say(format!("  then it {}", w.end));
        ends.push(w.end.clone());
    }
    out.set("ends", serde_json::json!(ends));
}

/// The rules a witness hop names (`s2 in 1: table 0 #3 (priority 1)`), in
/// dump-flows words.
fn rules_of(net: &sts_mocknet::Network, hop: &str) -> Vec<String> {
    let Some(sw) = hop.split_whitespace().next().and_then(|w| w.strip_prefix('s')).and_then(|d| d.parse::<u64>().ok())
    else {
        return Vec::new();
    };
    let Some(sw) = net.switches.get(&sw) else { return Vec::new() };
    let mut rules = Vec::new();
    let mut words = hop.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w != "table" {
            continue;
        }
        let table = words.next().and_then(|t| t.parse::<usize>().ok());
        let index = words.next().and_then(|i| i.strip_prefix('#')).and_then(|i| i.parse::<usize>().ok());
        if let (Some(t), Some(i)) = (table, index) {
            if let Some(e) = sw.tables.get(t).and_then(|tb| tb.entries().get(i)) {
                rules.push(sts_report::flows::entry_with(t, e, None).trim_start().to_string());
            }
        }
    }
    rules
}
