//! Topologies: which switches, hosts and links a network has.
//!
//! Generators follow Mininet's conventions where they exist: `linear(n)` is a
//! chain of n switches with one host each; `tree(depth, fanout)` has hosts on
//! the leaves, `fanout` per leaf switch. Datapath ids are 1.., hosts h1.. with
//! MAC 00:00:00:00:00:NN and IP 10.0.0.N.

use std::net::Ipv4Addr;

use sts_proxy::wire::Mac;

mod file;
pub use file::{TopologyFileError, MAX_FILE_SWITCHES};

/// A host to place on a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub mac: Mac,
    pub ip: Ipv4Addr,
    pub switch: u64,
}

/// A network layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub switches: Vec<u64>,
    pub hosts: Vec<HostSpec>,
    /// Switch-to-switch links.
    pub links: Vec<(u64, u64)>,
}

impl Topology {
    fn with_switches(n: u64) -> Topology {
        Topology { switches: (1..=n).collect(), ..Default::default() }
    }

    /// Adds a host on `switch` with the next address.
    pub fn add_host(&mut self, switch: u64) {
        let n = self.hosts.len() as u64 + 1;
        let b = n.to_be_bytes();
        self.hosts.push(HostSpec {
            name: format!("h{n}"),
            mac: Mac([b[2], b[3], b[4], b[5], b[6], b[7]]),
            ip: Ipv4Addr::from(0x0a00_0000u32 + n as u32),
            switch,
        });
    }

    /// Switches 1..=n wired by `links`, no hosts (place them with [`Topology::place_hosts`]).
    pub fn custom(n: u64, links: &[(u64, u64)]) -> Topology {
        Topology { links: links.to_vec(), ..Topology::with_switches(n) }
    }

    /// Replaces the hosts: one per entry of `switches`, on that switch, named
    /// and addressed h1, h2 ... in order.
    pub fn place_hosts(&mut self, switches: &[u64]) {
        self.hosts.clear();
        switches.iter().for_each(|&s| self.add_host(s));
    }

    /// A chain s1 - s2 - ... - sn, one host per switch.
    pub fn linear(n: u64) -> Topology {
        let mut t = Topology::with_switches(n);
        (1..=n).for_each(|s| t.add_host(s));
        t.links = (1..n).map(|s| (s, s + 1)).collect();
        t
    }

    /// A hub s1 with n leaf switches s2..s(n+1), one host per leaf.
    pub fn star(n: u64) -> Topology {
        let mut t = Topology::with_switches(n + 1);
        (2..=n + 1).for_each(|s| t.add_host(s));
        t.links = (2..=n + 1).map(|s| (1, s)).collect();
        t
    }

    /// Every pair of n switches linked, one host per switch (cycles for n ≥ 3).
    pub fn mesh(n: u64) -> Topology {
        let mut t = Topology::with_switches(n);
        (1..=n).for_each(|s| t.add_host(s));
        t.links = (1..=n).flat_map(|a| (a + 1..=n).map(move |b| (a, b))).collect();
        t
    }

    /// A tree of switches `depth` levels deep, each inner switch with `fanout`
    /// children, and `fanout` hosts on each leaf switch.
    pub fn tree(depth: u32, fanout: u64) -> Topology {
        let mut t = Topology::default();
        let mut next = 1u64;
        fn grow(t: &mut Topology, next: &mut u64, level: u32, depth: u32, fanout: u64) -> u64 {
            let me = *next;
            *next += 1;
            t.switches.push(me);
            for _ in 0..fanout {
                if level < depth {
                    let child = grow(t, next, level + 1, depth, fanout);
                    t.links.push((me, child));
                } else {
                    t.add_host(me);
                }
            }
            me
        }
        grow(&mut t, &mut next, 1, depth.max(1), fanout);
        t
    }

    /// The k-ary fat-tree (k even): (k/2)² core switches, k pods of k/2
    /// aggregation and k/2 edge switches, k/2 hosts per edge switch.
    pub fn fat_tree(k: u64) -> Topology {
        let k = k.max(2) & !1;
        let half = k / 2;
        let n_core = half * half;
        let mut t = Topology::with_switches(n_core + k * k);
        let agg = |pod: u64, i: u64| n_core + pod * k + i + 1;
        let edge = |pod: u64, i: u64| n_core + pod * k + half + i + 1;
        for pod in 0..k {
            for a in 0..half {
                for c in 0..half {
                    t.links.push((a * half + c + 1, agg(pod, a)));
                }
                for e in 0..half {
                    t.links.push((agg(pod, a), edge(pod, e)));
                }
            }
            for e in 0..half {
                (0..half).for_each(|_| t.add_host(edge(pod, e)));
            }
        }
        t
    }

    /// Number of ports switch `s` needs (one scan; use [`Topology::degrees`] for all).
    pub fn degree(&self, s: u64) -> u32 {
        self.degrees().get(&s).copied().unwrap_or(0)
    }

    /// Ports every switch needs, in one pass over hosts and links.
    pub fn degrees(&self) -> std::collections::BTreeMap<u64, u32> {
        let mut d: std::collections::BTreeMap<u64, u32> = self.switches.iter().map(|&s| (s, 0)).collect();
        for h in &self.hosts {
            *d.entry(h.switch).or_default() += 1;
        }
        for &(a, b) in &self.links {
            *d.entry(a).or_default() += 1;
            *d.entry(b).or_default() += 1;
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_have_the_expected_sizes() {
        let t = Topology::tree(2, 2);
        assert_eq!((t.switches.len(), t.hosts.len(), t.links.len()), (3, 4, 2));
        let t = Topology::fat_tree(4);
        assert_eq!((t.switches.len(), t.hosts.len(), t.links.len()), (20, 16, 32));
        assert!(t.switches.iter().all(|&s| t.degree(s) == 4));
        assert_eq!(t.degrees().values().sum::<u32>(), 2 * 32 + 16);
        let t = Topology::linear(3);
        assert_eq!((t.links.clone(), t.hosts[2].ip), (vec![(1, 2), (2, 3)], Ipv4Addr::new(10, 0, 0, 3)));
        assert_eq!(Topology::mesh(3).links.len(), 3);
    }
}
