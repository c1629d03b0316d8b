//! Bug identity: when two violations are "the same bug".
//!
//! A violation names its **victim** (the host a blackhole starves, the
//! controller that died) and, where it can be found, its **culprit**: what in
//! the network or the controller causes it. For a forwarding violation that is
//! the switch, the table and a signature of the rule that decided the
//! traffic's fate (its priority and the fields it matches; not cookies,
//! counters or the values matched, which name the victim), or "no rule
//! matches"; for a controller
//! error, the exception class and the code location of the traceback; for
//! liveness, the process or the switch connection.
//!
//! A replay and a minimization compare violations at one [`Same`] level. The
//! default, [`Same::Culprit`], keeps a minimization on the bug it was given:
//! a rule that blackholes several hosts is one bug whichever host it starves
//! in a replay, and two rules that starve the same host are two bugs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sts_mocknet::flow::FlowEntry;

use crate::check::Violation;

/// How closely two violations must agree to count as the same bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Same {
    /// The same invariant (any loop is any loop).
    Kind,
    /// The same invariant and culprit, whoever the victim and on whichever
    /// switch ([`without_switch`]): one stale rule that shows on the switch a
    /// host moved to is one bug wherever the host went. Falls back to
    /// [`Same::Victim`] when either violation has no culprit (a trace
    /// written before culprits were recorded).
    #[default]
    Culprit,
    /// As [`Same::Culprit`], on the same switch too.
    Switch,
    /// The same invariant and victim, whatever causes it (what sts compared before culprits).
    Victim,
    /// The same invariant, elements and culprit.
    Exact,
}

impl Same {
    /// Every level, loosest first.
    pub const ALL: [Same; 5] = [Same::Kind, Same::Culprit, Same::Switch, Same::Victim, Same::Exact];

    /// The name used on the command line, in configs and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Same::Kind => "kind",
            Same::Culprit => "culprit",
            Same::Switch => "switch",
            Same::Victim => "victim",
            Same::Exact => "exact",
        }
    }
}

impl fmt::Display for Same {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Same {
    type Err = String;

    fn from_str(s: &str) -> Result<Same, String> {
        Same::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("'{s}' is not a level of sameness (kind, culprit, switch, victim or exact)"))
    }
}

impl Violation {
    /// The key two violations share when they are the same bug at `level`
    /// (persistence counts violations by it). At [`Same::Culprit`], a
    /// violation without a culprit is keyed by its victim.
    pub fn identity(&self, level: Same) -> String {
        match (level, &self.culprit) {
            (Same::Kind, _) => self.invariant.name().to_string(),
            (Same::Victim, _) | (Same::Culprit | Same::Switch, None) => self.fingerprint(),
            (Same::Culprit, Some(c)) => format!("{} @ {}", self.invariant, without_switch(c)),
            (Same::Switch, Some(c)) => format!("{} @ {c}", self.invariant),
            (Same::Exact, c) => format!(
                "{}:{} @ {}",
                self.invariant,
                self.elements.join(","),
                c.as_deref().unwrap_or("unknown culprit")
            ),
        }
    }

    /// Whether `other` is the same bug as `self` at `level`. At
    /// [`Same::Culprit`], when either side has no culprit the victims decide.
    pub fn same_bug(&self, other: &Violation, level: Same) -> bool {
        match level {
            Same::Culprit | Same::Switch if self.culprit.is_none() || other.culprit.is_none() => {
                self.identity(Same::Victim) == other.identity(Same::Victim)
            }
            _ => self.identity(level) == other.identity(level),
        }
    }
}

/// The switch a culprit names (`s3` of `s3 table 0: ...`), if it names one.
pub fn culprit_switch(culprit: &str) -> Option<&str> {
    let end = culprit.find([' ', ':']).unwrap_or(culprit.len());
    let name = &culprit[..end];
    let digits = name.strip_prefix('s')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

/// A culprit without the switch it names: `table 0: a rule of priority 1 on
/// eth_dst` for `s3 table 0: a rule of priority 1 on eth_dst`, `a switch has
/// no controller connection` for `s2 has no controller connection`. What a
/// bug is, apart from where it showed this time.
pub fn without_switch(culprit: &str) -> String {
    match culprit_switch(culprit) {
        Some(name) => {
            let rest = culprit[name.len()..].trim_start_matches([' ', ':']);
            if rest.starts_with("table ") || rest.starts_with("port ") {
                rest.to_string()
            } else {
                format!("a switch {rest}")
            }
        }
        None => culprit.to_string(),
    }
}

/// A flow entry's signature: what makes it the same rule in another run.
/// Its priority and the fields it matches, not the values (those name the
/// victim: the learned MAC of one host or another) nor cookies and counters.
pub fn rule_signature(entry: &FlowEntry) -> String {
    if entry.priority == 0 && entry.r#match.fields.is_empty() {
        return "the table-miss entry".into();
    }
    let mut fields: Vec<&str> = entry.r#match.fields.iter().map(|f| f.field.name()).collect();
    fields.sort_unstable();
    fields.dedup();
    if fields.is_empty() {
        format!("a match-all rule of priority {}", entry.priority)
    } else {
        format!("a rule of priority {} on {}", entry.priority, fields.join(","))
    }
}

/// The culprit of a controller error: for a Python traceback among `lines`
/// (the erring controller's lines from the first error line on), the
/// exception class and the innermost code location, `KeyError at app.py:42
/// in handler`; otherwise the first line with its numbers masked.
pub fn error_culprit(lines: &[&str]) -> Option<String> {
    let first = *lines.first()?;
    let mut location: Option<String> = None;
    for line in lines {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("File \"") {
            // File "/path/to/app.py", line 42, in handler
            let Some((path, tail)) = rest.split_once('"') else { continue };
            let file = path.rsplit('/').next().unwrap_or(path);
            let number = tail.split("line ").nth(1).and_then(|t| t.split(',').next()).map(str::trim);
            let func = tail.split(", in ").nth(1).map(str::trim);
            location = Some(match (number, func) {
                (Some(n), Some(f)) => format!("{file}:{n} in {f}"),
                (Some(n), None) => format!("{file}:{n}"),
                _ => file.to_string(),
            });
            continue;
        }
        // The exception line ends a traceback: unindented `Class: message`
        // (or the bare class) after at least one frame.
        if let Some(at) = &location {
            if !line.starts_with(char::is_whitespace) {
                let class = trimmed.split(':').next().unwrap_or("").trim();
                let is_name = !class.is_empty()
                    && class.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.')
                    && class.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
                if is_name {
                    return Some(format!("{class} at {at}"));
                }
            }
        }
    }
    Some(mask_numbers(first.trim()))
}

/// Where a Python traceback among `lines` starts that has not ended yet (no
/// exception line after its frames): the rest of it is still on its way, and
/// the error's culprit would be read from half of it.
pub fn open_traceback(lines: &[&str]) -> Option<usize> {
    let start = lines.iter().rposition(|l| l.trim_start().starts_with("Traceback (most recent call last)"))?;
    let ended = error_culprit(&lines[start..]).is_some_and(|c| c.contains(" at "));
    (!ended).then_some(start)
}

/// Masks numbers: every run of hex digits and `.:x-` that contains a digit
/// becomes `#` (so `10.0.0.7:4242` and `0x1a` vanish whole, and `sw1` keeps
/// its stem as `sw#`); everything else is kept. Log lines that differ only
/// there are the same line in another run.
pub fn mask_numbers(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut token = String::new();
    let flush = |token: &mut String, out: &mut String| {
        if token.chars().any(|c| c.is_ascii_digit()) {
            out.push('#');
        } else {
            out.push_str(token);
        }
        token.clear();
    };
    for c in line.chars() {
        if c.is_ascii_hexdigit() || matches!(c, '.' | ':' | 'x' | '-') {
            token.push(c);
        } else {
            flush(&mut token, &mut out);
            out.push(c);
        }
    }
    flush(&mut token, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Invariant;

    fn hole(victim: &str, culprit: Option<&str>) -> Violation {
        Violation {
            invariant: Invariant::Blackhole,
            elements: vec!["h1".into(), victim.into()],
            summary: String::new(),
            witness: None,
            culprit: culprit.map(str::to_string),
        }
    }

    #[test]
    fn levels_tell_victims_and_culprits_apart() {
        let drop_h2 = hole("h2", Some("s3 table 0: a match-all rule of priority 100 drops"));
        let drop_h3 = hole("h3", Some("s3 table 0: a match-all rule of priority 100 drops"));
        let stale_h2 = hole("h2", Some("s2 table 0: a rule of priority 1 on eth_dst"));
        assert!(drop_h2.same_bug(&drop_h3, Same::Culprit), "one rule, two victims: one bug");
        assert!(!drop_h2.same_bug(&drop_h3, Same::Victim));
        assert!(!drop_h2.same_bug(&stale_h2, Same::Culprit), "two rules, one victim: two bugs");
        assert!(drop_h2.same_bug(&stale_h2, Same::Victim));
        assert!(drop_h2.same_bug(&stale_h2, Same::Kind));
        assert!(!drop_h2.same_bug(&drop_h3, Same::Exact));
        assert!(drop_h2.same_bug(&drop_h2.clone(), Same::Exact));
    }

    #[test]
    fn one_rule_on_several_switches_is_one_bug_unless_the_switch_is_asked_for() {
        let on_s1 = hole("h2", Some("s1 table 0: a rule of priority 1 on eth_dst,eth_src,in_port"));
        let on_s3 = hole("h3", Some("s3 table 0: a rule of priority 1 on eth_dst,eth_src,in_port"));
        assert!(on_s1.same_bug(&on_s3, Same::Culprit), "one stale rule, wherever the host went");
        assert!(!on_s1.same_bug(&on_s3, Same::Switch));
        assert!(on_s1.same_bug(&on_s1.clone(), Same::Switch));
        assert_eq!(
            on_s1.identity(Same::Culprit),
            "blackhole @ table 0: a rule of priority 1 on eth_dst,eth_src,in_port"
        );
        let other_rule = hole("h2", Some("s1 table 0: a match-all rule of priority 100"));
        assert!(!on_s1.same_bug(&other_rule, Same::Culprit), "another rule is another bug");
        assert_eq!(culprit_switch("s12 port 3 does not receive"), Some("s12"));
        assert_eq!(culprit_switch("KeyError at app.py:42 in f"), None);
        assert_eq!(culprit_switch("sx table 0"), None);
        assert_eq!(without_switch("s12 port 3 does not receive"), "port 3 does not receive");
        assert_eq!(without_switch("s2 has no controller connection"), "a switch has no controller connection");
        assert_eq!(without_switch("c0 is not running"), "c0 is not running");
        assert_eq!(without_switch("KeyError at s1.py:3 in f"), "KeyError at s1.py:3 in f");
    }

    #[test]
    fn without_a_culprit_the_victim_decides() {
        let old = hole("h2", None);
        assert!(old.same_bug(&hole("h2", Some("anything")), Same::Culprit));
        assert!(!old.same_bug(&hole("h3", Some("anything")), Same::Culprit));
        assert_eq!(old.identity(Same::Culprit), "blackhole:h2");
    }

    #[test]
    fn levels_parse_and_print() {
        for l in Same::ALL {
            assert_eq!(l.name().parse::<Same>(), Ok(l));
        }
        assert!("host".parse::<Same>().unwrap_err().contains("kind, culprit, switch, victim or exact"));
        assert_eq!(Same::default(), Same::Culprit);
    }

    #[test]
    fn tracebacks_give_class_and_innermost_location() {
        let lines = [
            "Traceback (most recent call last):",
            "  File \"/usr/lib/python3/site-packages/os_ken/base/app_manager.py\", line 290, in _event_loop",
            "    handler(ev)",
            "  File \"/tmp/suite/app.py\", line 42, in port_status",
            "    self.ports[dpid].append(port)",
            "KeyError: 3",
            "unrelated line 7",
        ];
        assert_eq!(error_culprit(&lines).as_deref(), Some("KeyError at app.py:42 in port_status"));
        let dotted = ["Traceback (most recent call last):", "  File \"x.py\", line 1, in f", "a.b.Oops"];
        assert_eq!(error_culprit(&dotted).as_deref(), Some("a.b.Oops at x.py:1 in f"));
        assert_eq!(error_culprit(&["ERROR: port 7 vanished"]).as_deref(), Some("ERROR: port # vanished"));
        assert_eq!(error_culprit(&[]), None);
        assert_eq!(open_traceback(&lines), None, "ended");
        assert_eq!(open_traceback(&lines[..4]), Some(0), "its exception line is still to come");
        assert_eq!(open_traceback(&["ERROR: no traceback"]), None);
    }

    #[test]
    fn mask_numbers_keeps_words_and_masks_numbers() {
        assert_eq!(
            mask_numbers("DPID 1 (0x1) sw1 L2 learned on Port 2 00:00:00:00:00:01"),
            "DPID # (#) sw# L# learned on Port # #"
        );
        assert_eq!(mask_numbers("no numbers here"), "no numbers here");
    }
}
