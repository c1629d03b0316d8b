//! The topology file: a network layout as a list of links, Mininet style.
//!
//! ```text
//! # a dumbbell: two switches, two hosts on each side
//! link s1 s2        # a switch-to-switch link
//! link h1 s1        # a host and the switch it is attached to
//! link h2 s1
//! link h3 s2
//! link h4 s2
//! switch s3         # a switch with no links yet (hosts may migrate to it)
//! ```
//!
//! One statement per line; `#` starts a comment. Switches are `s1`, `s2` ...
//! (the number is the datapath id) and must be numbered without gaps;
//! hosts are `h1`, `h2` ... , also without gaps, each attached to exactly one
//! switch, and addressed as in every other topology (h3 is 10.0.0.3).
//! The format is documented for users in `docs/topology-format.md`.

use std::collections::BTreeMap;
use std::fmt;

use super::Topology;

/// The most switches a topology file may name (a typo like `s1000000000`
/// must not allocate a billion switches).
pub const MAX_FILE_SWITCHES: u64 = 1_000_000;

/// Why a topology file was refused: the line (from 1; 0 for the file as a
/// whole) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyFileError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TopologyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for TopologyFileError {}

/// A node named in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Switch(u64),
    Host(u64),
}

fn node(word: &str, line: usize) -> Result<Node, TopologyFileError> {
    let err = |message: String| TopologyFileError { line, message };
    let (kind, number) = word.split_at(word.char_indices().nth(1).map_or(word.len(), |(i, _)| i));
    let n: u64 = number
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| err(format!("{}: a node is s<N> (switch) or h<N> (host), N from 1", quote(word))))?;
    match kind {
        "s" if n > MAX_FILE_SWITCHES => Err(err(format!("{word}: switch numbers go up to {MAX_FILE_SWITCHES}"))),
        "s" => Ok(Node::Switch(n)),
        "h" if n > MAX_FILE_SWITCHES => Err(err(format!("{word}: host numbers go up to {MAX_FILE_SWITCHES}"))),
        "h" => Ok(Node::Host(n)),
        _ => Err(err(format!("{}: a node is s<N> (switch) or h<N> (host), N from 1", quote(word)))),
    }
}

/// Quotes what a line says, at most its first 24 characters up to anything
/// that cannot be part of a statement or a node name (so a file that is not
/// a topology at all, say a password file named by mistake or on purpose,
/// is not echoed into the error).
fn quote(text: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.' | '#');
    let shown: String = text.chars().take_while(|&c| safe(c)).take(24).collect();
    if shown.len() == text.len() {
        format!("{shown:?}")
    } else {
        format!("\"{shown}...\"")
    }
}

impl Topology {
    /// Parses a topology file (see the module documentation).
    pub fn parse(text: &str) -> Result<Topology, TopologyFileError> {
        let mut max_switch = 0u64;
        // Where each switch was first named, to report gaps usefully.
        let mut switches_seen: BTreeMap<u64, usize> = BTreeMap::new();
        let mut host_at: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
        let mut links = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| TopologyFileError { line, message };
            let words: Vec<&str> = raw.split('#').next().unwrap_or("").split_whitespace().collect();
            let mut see = |s: u64| {
                switches_seen.entry(s).or_insert(line);
                max_switch = max_switch.max(s);
            };
            match words.as_slice() {
                [] => {}
                ["switch", name] => match node(name, line)? {
                    Node::Switch(s) => see(s),
                    Node::Host(_) => {
                        return Err(err(format!(
                            "switch {name}: {name} is a host; write `link {name} s<N>` to attach it"
                        )))
                    }
                },
                ["link", a, b] => match (node(a, line)?, node(b, line)?) {
                    (Node::Switch(x), Node::Switch(y)) if x == y => {
                        return Err(err(format!("link {a} {b}: a switch cannot be linked to itself")))
                    }
                    (Node::Switch(x), Node::Switch(y)) => {
                        see(x);
                        see(y);
                        links.push((x, y));
                    }
                    (Node::Host(h), Node::Switch(s)) | (Node::Switch(s), Node::Host(h)) => {
                        see(s);
                        if let Some(&(_, first)) = host_at.get(&h) {
                            return Err(err(format!("h{h} is already attached (line {first}); a host has one link")));
                        }
                        host_at.insert(h, (s, line));
                    }
                    (Node::Host(_), Node::Host(_)) => {
                        return Err(err(format!("link {a} {b}: hosts attach to switches, not to each other")))
                    }
                },
                ["link", ..] => {
                    return Err(err(format!(
                        "{}: a link joins two nodes: `link s1 s2` or `link h1 s1`",
                        quote(raw.trim())
                    )))
                }
                ["switch", ..] => {
                    return Err(err(format!("{}: write one switch per line: `switch s3`", quote(raw.trim()))));
                }
                // Not quoted: a file that is no topology (a line of
                // /etc/shadow) must not be echoed, not even its first field.
                [_, ..] => {
                    return Err(err("not a statement of a topology file (known: link, switch)".to_string()));
                }
            }
        }
        if max_switch == 0 {
            return Err(TopologyFileError {
                line: 0,
                message: "no switches: the file needs at least one `link` or `switch` line".into(),
            });
        }
        if let Some(missing) = (1..=max_switch).find(|s| !switches_seen.contains_key(s)) {
            return Err(TopologyFileError {
                line: switches_seen[&max_switch],
                message: format!(
                    "s{max_switch} is named but s{missing} is not: switches are numbered s1, s2 ... without gaps"
                ),
            });
        }
        let max_host = host_at.keys().next_back().copied().unwrap_or(0);
        if let Some(missing) = (1..=max_host).find(|h| !host_at.contains_key(h)) {
            return Err(TopologyFileError {
                line: host_at[&max_host].1,
                message: format!(
                    "h{max_host} is attached but h{missing} is not: hosts are numbered h1, h2 ... without gaps"
                ),
            });
        }
        let mut t = Topology::custom(max_switch, &links);
        t.place_hosts(&host_at.values().map(|&(s, _)| s).collect::<Vec<_>>());
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dumbbell_parses_with_hosts_in_order() {
        let t = Topology::parse(
            "# dumbbell\nlink s1 s2\nlink h2 s1   # second host\nlink s1 h1\n\nlink h3 s2\nswitch s3\n",
        )
        .unwrap();
        assert_eq!(t.switches, vec![1, 2, 3]);
        assert_eq!(t.links, vec![(1, 2)]);
        let placed: Vec<(&str, u64)> = t.hosts.iter().map(|h| (h.name.as_str(), h.switch)).collect();
        assert_eq!(placed, vec![("h1", 1), ("h2", 1), ("h3", 2)]);
        assert_eq!(t.hosts[2].ip, std::net::Ipv4Addr::new(10, 0, 0, 3));
    }

    #[test]
    fn a_file_that_is_not_a_topology_is_not_echoed() {
        let e = Topology::parse("root:x:0:0:secret-hash-here:/root:/bin/bash\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(!e.message.contains("secret"), "{}", e.message);
        assert!(!e.message.contains("root"), "{}", e.message);
        assert!(e.message.contains("not a statement of a topology file"), "{}", e.message);
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases: &[(&str, usize, &str)] = &[
            ("link s1 s2\nlink s1\n", 2, "a link joins two nodes"),
            ("link s1 s1\n", 1, "itself"),
            ("link h1 h2\n", 1, "not to each other"),
            ("link h1 s1\nlink h1 s2\n", 2, "already attached (line 1)"),
            ("link s1 x3\n", 1, "s<N> (switch) or h<N> (host)"),
            ("link s0 s1\n", 1, "N from 1"),
            ("link s1 s99999999999\n", 1, "go up to"),
            ("switch h1\n", 1, "is a host"),
            ("node s1\n", 1, "not a statement of a topology file"),
            ("link s1 s3\n", 1, "s2 is not"),
            ("link h2 s1\n", 1, "h1 is not"),
            ("# nothing\n", 0, "no switches"),
        ];
        for &(text, line, needle) in cases {
            let e = Topology::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn unicode_and_odd_words_are_errors_not_panics() {
        for text in ["link é1 s1", "link s s1", "link h s1", "switch", "link", "link s1 s2 s3", "s1 s2"] {
            assert!(Topology::parse(text).is_err(), "{text:?}");
        }
    }
}
