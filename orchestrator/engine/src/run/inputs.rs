//! External events: injecting them into a running network, and the seeded
//! fuzzer that chooses them.

use std::collections::BTreeSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sts_mocknet::network::{Endpoint, LinkFault, Network};
use sts_proxy::interpose::Action;

use crate::config::Rates;
use crate::session::Session;
use crate::InputError;
use sts_trace::{External, Fate, MsgType, Port};

fn host_index(net: &Network, name: &str) -> Result<usize, InputError> {
    net.hosts.iter().position(|h| h.name == name).ok_or_else(|| InputError::NoHost(name.to_string()))
}

/// `e` as the network now stands: a migration moves the host from where it
/// is now, not from where it was when the trace was recorded (a console's
/// what-if, or a minimization that left out an earlier move, may have moved
/// it since), and is recorded and described so.
pub fn as_now(net: &Network, e: &External) -> External {
    match e {
        External::HostMigrate { host, from, to } => {
            let now =
                host_index(net, host).ok().and_then(|i| match net.live_peer(sts_mocknet::network::Endpoint::Host(i)) {
                    Some(sts_mocknet::network::Endpoint::Switch { dpid, .. }) => Some(dpid),
                    _ => None,
                });
            External::HostMigrate { host: host.clone(), from: now.unwrap_or(*from), to: *to }
        }
        other => other.clone(),
    }
}

fn check_link(net: &Network, a: Port, b: Port) -> Result<Endpoint, InputError> {
    let ea = Endpoint::Switch { dpid: a.switch, port: a.port };
    let eb = Endpoint::Switch { dpid: b.switch, port: b.port };
    if net.peer(ea) != Some(eb) {
        return Err(InputError::NotLinked { a, b });
    }
    Ok(ea)
}

fn check_relay(relays: &[String], name: &str) -> Result<(), InputError> {
    if relays.iter().any(|r| r == name) {
        Ok(())
    } else {
        Err(InputError::NoRelay { name: name.to_string(), known: relays.to_vec() })
    }
}

/// An input checked against the network, with what it names resolved
/// (hosts to indices, links to one of their ends, controllers to indices):
/// [`apply`] acts on it without looking anything up again.
#[derive(Debug)]
enum Resolved<'e> {
    Policy(&'e str),
    Partition {
        relay: &'e str,
        blocked: bool,
    },
    Crash(usize),
    Restart(usize),
    Ping {
        src: usize,
        dst: usize,
    },
    Link {
        at: Endpoint,
        up: bool,
    },
    LinkFault {
        at: Endpoint,
        fault: Option<LinkFault>,
    },
    Migrate {
        host: usize,
        to: u64,
    },
    /// Switch and control-channel inputs: their switch and message type
    /// checked, nothing to resolve.
    AsIs(&'e External),
}

/// Checks that `e` fits the network (hosts, switches, links and relays
/// exist) and resolves what it names, without changing anything.
fn resolve<'e>(
    net: &Network,
    controllers: usize,
    relays: &[String],
    policies: &[String],
    e: &'e External,
) -> Result<Resolved<'e>, InputError> {
    let no_switch = |d: &u64| if net.switches.contains_key(d) { Ok(()) } else { Err(InputError::NoSwitch(*d)) };
    Ok(match e {
        External::Policy { name, .. } if !policies.contains(name) => {
            return Err(crate::policy::unknown(name, policies))
        }
        External::Policy { name, .. } => Resolved::Policy(name),
        External::Partition { relay } | External::PartitionHeal { relay } => {
            check_relay(relays, relay)?;
            Resolved::Partition { relay, blocked: matches!(e, External::Partition { .. }) }
        }
        External::ControllerCrash { controller } => {
            Resolved::Crash(crate::session::controller_index(controller, controllers)?)
        }
        External::ControllerRestart { controller } => {
            Resolved::Restart(crate::session::controller_index(controller, controllers)?)
        }
        External::Ping { src, dst } => Resolved::Ping { src: host_index(net, src)?, dst: host_index(net, dst)? },
        External::LinkDown { a, b } | External::LinkUp { a, b } => {
            Resolved::Link { at: check_link(net, *a, *b)?, up: matches!(e, External::LinkUp { .. }) }
        }
        External::DataplaneDrop { a, b } => {
            Resolved::LinkFault { at: check_link(net, *a, *b)?, fault: Some(LinkFault::Drop) }
        }
        External::DataplaneDelay { a, b, ms } => {
            Resolved::LinkFault { at: check_link(net, *a, *b)?, fault: Some(LinkFault::Delay(*ms)) }
        }
        External::DataplaneDropEnd { a, b } | External::DataplaneDelayEnd { a, b } => {
            Resolved::LinkFault { at: check_link(net, *a, *b)?, fault: None }
        }
        External::HostMigrate { host, to, .. } => {
            let host = host_index(net, host)?;
            no_switch(to)?;
            Resolved::Migrate { host, to: *to }
        }
        External::SwitchDown { switch }
        | External::SwitchUp { switch }
        | External::ControlDelay { switch, .. }
        | External::ControlDelayEnd { switch } => {
            no_switch(switch)?;
            Resolved::AsIs(e)
        }
        External::ControlHold { switch, msg_type } => {
            check_switch(net, *switch)?;
            check_msg_type(*msg_type)?;
            Resolved::AsIs(e)
        }
        External::ControlRelease { switch } => {
            check_switch(net, *switch)?;
            Resolved::AsIs(e)
        }
        External::HeldMessage { switch, msg_type, .. }
        | External::ControlDrop { switch, msg_type }
        | External::ControlDelayNext { switch, msg_type, .. }
        | External::ControlReorderNext { switch, msg_type, .. } => {
            check_switch(net, Some(*switch))?;
            check_msg_type(*msg_type)?;
            Resolved::AsIs(e)
        }
    })
}

/// Checks that `e` fits the network (hosts, switches, links and relays
/// exist) without changing anything.
pub fn validate(
    net: &Network,
    controllers: usize,
    relays: &[String],
    policies: &[String],
    e: &External,
) -> Result<(), InputError> {
    resolve(net, controllers, relays, policies, e).map(|_| ())
}

fn check_switch(net: &Network, switch: Option<u64>) -> Result<(), InputError> {
    match switch {
        Some(d) if !net.switches.contains_key(&d) => Err(InputError::NoSwitch(d)),
        _ => Ok(()),
    }
}

/// A message type an input can act on, by name: any of OpenFlow 1.0's and
/// 1.3's but `unknown` (which the trace's reader accepts for recorded
/// messages of types those versions lack).
pub fn msg_type(name: &str) -> Result<MsgType, InputError> {
    MsgType::from_name(name).filter(|t| t.as_str() != "unknown").ok_or_else(|| InputError::NoMessageType(name.into()))
}

fn check_msg_type(t: MsgType) -> Result<(), InputError> {
    msg_type(t.as_str()).map(|_| ())
}

/// The held message an [`External::HeldMessage`] is about: the `index`-th
/// held message of `msg_type` on `switch`'s connections.
pub fn held_message(runner: &crate::netrun::NetRunner, switch: u64, msg_type: &str, index: u32) -> Option<u64> {
    runner
        .interposer
        .waiting()
        .into_iter()
        .filter(|w| w.due.is_none() && w.channel.dpid == switch && w.msg_type == msg_type)
        .nth(index as usize)
        .map(|w| w.seq)
}

/// Injects `e`. An event that does not fit the network (an unknown host, a
/// link that does not exist) is an error naming what is wrong.
pub async fn apply(session: &mut Session, e: &External) -> Result<(), InputError> {
    let relays: Vec<String> = session.relays.keys().cloned().collect();
    let policies: Vec<String> = session.policies.keys().cloned().collect();
    let input = resolve(&session.runner.net, session.controllers.len(), &relays, &policies, e)?;
    let runner = &mut session.runner;
    match input {
        Resolved::Policy(name) => {
            session.apply_policy(name).await?;
        }
        Resolved::Partition { relay, blocked: true } => session.relays[relay].block(),
        Resolved::Partition { relay, blocked: false } => session.relays[relay].heal(),
        Resolved::Crash(i) => session.crash_controller(i)?,
        Resolved::Restart(i) => session.restart_controller(i).await?,
        Resolved::Ping { src, dst } => runner.send_ping(src, dst),
        Resolved::Link { at, up } => runner.set_link(at, up),
        Resolved::LinkFault { at, fault } => runner.set_link_fault(at, fault),
        Resolved::Migrate { host, to } => runner.migrate_host(host, to),
        Resolved::AsIs(e) => apply_to_switch(runner, e).await?,
    }
    Ok(())
}

/// Applies a switch or control-channel input (checked by [`resolve`]).
async fn apply_to_switch(runner: &mut crate::netrun::NetRunner, e: &External) -> Result<(), InputError> {
    match e {
        External::SwitchDown { switch } => runner.fail_switch(*switch),
        External::SwitchUp { switch } => {
            runner.recover_switch(*switch).await.map_err(|e| InputError::Restart(format!("s{switch}: {e}")))?
        }
        External::ControlDelay { switch, ms } => runner.interposer.delay(*switch, *ms),
        External::ControlDelayEnd { switch } => runner.interposer.end_delay(*switch),
        External::ControlHold { switch, msg_type } => runner.interposer.hold(*switch, msg_type.as_str()),
        External::ControlRelease { switch } => {
            runner.interposer.stop_holding(*switch);
            runner.release(*switch);
        }
        External::ControlDrop { switch, msg_type } => {
            runner.interposer.arm_once(*switch, msg_type.as_str(), Action::Drop)
        }
        External::ControlDelayNext { switch, msg_type, ms } => {
            runner.interposer.arm_once(*switch, msg_type.as_str(), Action::Delay(*ms))
        }
        External::ControlReorderNext { switch, msg_type, ms } => {
            runner.interposer.arm_once(*switch, msg_type.as_str(), Action::Reorder(*ms))
        }
        External::HeldMessage { switch, msg_type, index, fate } => {
            // Nothing held to act on (a candidate without its hold): nothing to do.
            if let Some(seq) = held_message(runner, *switch, msg_type.as_str(), *index) {
                match fate {
                    Fate::Deliver => runner.deliver_queued(seq),
                    Fate::Drop => runner.drop_queued(seq),
                    Fate::Delay { ms } => runner.delay_queued(seq, *ms),
                };
            }
        }
        // Resolved otherwise: never here.
        _ => {}
    }
    Ok(())
}

fn pick<T: Clone>(rng: &mut ChaCha8Rng, xs: &[T]) -> Option<T> {
    (!xs.is_empty()).then(|| xs[rng.gen_range(0..xs.len())].clone())
}

/// Starts a fault on one of `candidates` not already under it.
fn begin<T: Ord + Clone>(
    rng: &mut ChaCha8Rng,
    active: &mut BTreeSet<T>,
    candidates: impl IntoIterator<Item = T>,
) -> Option<T> {
    let free: Vec<T> = candidates.into_iter().filter(|c| !active.contains(c)).collect();
    let t = pick(rng, &free)?;
    active.insert(t.clone());
    Some(t)
}

/// Ends one of the `active` faults.
fn end<T: Ord + Clone>(rng: &mut ChaCha8Rng, active: &mut BTreeSet<T>) -> Option<T> {
    let all: Vec<T> = active.iter().cloned().collect();
    let t = pick(rng, &all)?;
    active.remove(&t);
    Some(t)
}

/// Chooses external events from a seed and per-step rates. Everything it
/// iterates is ordered, so the same seed, config and network state give the
/// same choices.
pub struct Fuzzer {
    rng: ChaCha8Rng,
    rates: Rates,
    failed: BTreeSet<(Port, Port)>,
    dropping: BTreeSet<(Port, Port)>,
    delaying: BTreeSet<(Port, Port)>,
    switches_down: BTreeSet<u64>,
    control_delayed: BTreeSet<u64>,
    /// The controllers it may crash (by index): those sts started.
    crashable: Vec<usize>,
    controllers_down: BTreeSet<usize>,
    relays: Vec<String>,
    partitioned: BTreeSet<String>,
    /// The config's policies (name, the policies it must come after, its
    /// controller), and those chosen so far.
    policies: Vec<(String, Vec<String>, String)>,
    applied: BTreeSet<String>,
}

impl Fuzzer {
    /// The same fuzzer, also partitioning the named relays (sorted).
    pub fn with_relays(mut self, mut relays: Vec<String>) -> Fuzzer {
        relays.sort();
        self.relays = relays;
        self
    }

    /// The same fuzzer, also applying the config's policies (`policy` rate):
    /// each time one whose `after` policies it chose earlier.
    pub fn with_policies(mut self, policies: &[crate::config::PolicyConfig]) -> Fuzzer {
        self.policies = policies.iter().map(|p| (p.name.clone(), p.after.clone(), p.controller.clone())).collect();
        self
    }

    /// The same fuzzer, never crashing the controllers at these indices
    /// (`remote` ones: sts did not start them).
    pub fn without_crashing(mut self, spared: &[usize]) -> Fuzzer {
        self.crashable.retain(|c| !spared.contains(c));
        self
    }

    /// A fuzzer for a network with `controllers` controllers.
    pub fn new(seed: u64, rates: Rates, controllers: usize) -> Fuzzer {
        Fuzzer {
            rng: ChaCha8Rng::seed_from_u64(seed),
            rates,
            failed: BTreeSet::new(),
            dropping: BTreeSet::new(),
            delaying: BTreeSet::new(),
            switches_down: BTreeSet::new(),
            control_delayed: BTreeSet::new(),
            crashable: (0..controllers).collect(),
            controllers_down: BTreeSet::new(),
            relays: Vec::new(),
            partitioned: BTreeSet::new(),
            policies: Vec::new(),
            applied: BTreeSet::new(),
        }
    }

    fn links(net: &Network) -> Vec<(Port, Port)> {
        net.switch_links()
            .into_iter()
            .map(|((d1, p1), (d2, p2))| (Port { switch: d1, port: p1 }, Port { switch: d2, port: p2 }))
            .collect()
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> Option<T> {
        pick(&mut self.rng, xs)
    }

    /// The events of one step (often none).
    pub fn step(&mut self, net: &Network) -> Vec<External> {
        let mut out = Vec::new();
        for (name, rate) in self.rates.clone().named() {
            // Partitions draw nothing without relays, so adding them left
            // every older seed's choices as they were.
            let needs_relays = matches!(name, "partition" | "partition_heal");
            let needs_policies = name == "policy" && self.policies.is_empty();
            if rate <= 0.0 || (needs_relays && self.relays.is_empty()) || needs_policies || !self.rng.gen_bool(rate) {
                continue;
            }
            let e = match name {
                "traffic" => {
                    let hosts: Vec<usize> = (0..net.hosts.len()).filter(|&i| net.host_port(i).is_some()).collect();
                    if hosts.len() < 2 {
                        continue;
                    }
                    let s = self.pick(&hosts).expect("non-empty");
                    let others: Vec<usize> = hosts.into_iter().filter(|&d| d != s).collect();
                    let d = self.pick(&others).expect("non-empty");
                    Some(External::Ping { src: net.hosts[s].name.clone(), dst: net.hosts[d].name.clone() })
                }
                "link_failure" => {
                    begin(&mut self.rng, &mut self.failed, Self::links(net)).map(|(a, b)| External::LinkDown { a, b })
                }
                "link_recovery" => end(&mut self.rng, &mut self.failed).map(|(a, b)| External::LinkUp { a, b }),
                "host_migration" => {
                    let hosts: Vec<(usize, u64)> =
                        (0..net.hosts.len()).filter_map(|i| net.host_port(i).map(|(d, _)| (i, d))).collect();
                    match self.pick(&hosts) {
                        Some((i, from)) => {
                            let others: Vec<u64> = net.switches.keys().copied().filter(|&d| d != from).collect();
                            self.pick(&others).map(|to| External::HostMigrate {
                                host: net.hosts[i].name.clone(),
                                from,
                                to,
                            })
                        }
                        None => None,
                    }
                }
                "dataplane_drop" => begin(&mut self.rng, &mut self.dropping, Self::links(net))
                    .map(|(a, b)| External::DataplaneDrop { a, b }),
                "dataplane_drop_end" => {
                    end(&mut self.rng, &mut self.dropping).map(|(a, b)| External::DataplaneDropEnd { a, b })
                }
                "dataplane_delay" => {
                    let ms = self.rates.delay_ms;
                    let clean: Vec<(Port, Port)> =
                        Self::links(net).into_iter().filter(|l| !self.dropping.contains(l)).collect();
                    begin(&mut self.rng, &mut self.delaying, clean).map(|(a, b)| External::DataplaneDelay { a, b, ms })
                }
                "dataplane_delay_end" => {
                    end(&mut self.rng, &mut self.delaying).map(|(a, b)| External::DataplaneDelayEnd { a, b })
                }
                "switch_failure" => begin(&mut self.rng, &mut self.switches_down, net.switches.keys().copied())
                    .map(|switch| External::SwitchDown { switch }),
                "switch_recovery" => {
                    end(&mut self.rng, &mut self.switches_down).map(|switch| External::SwitchUp { switch })
                }
                "control_delay" => {
                    let ms = self.rates.delay_ms;
                    begin(&mut self.rng, &mut self.control_delayed, net.switches.keys().copied())
                        .map(|switch| External::ControlDelay { switch, ms })
                }
                "control_delay_end" => {
                    end(&mut self.rng, &mut self.control_delayed).map(|switch| External::ControlDelayEnd { switch })
                }
                "controller_crash" => begin(&mut self.rng, &mut self.controllers_down, self.crashable.iter().copied())
                    .map(|c| External::ControllerCrash { controller: format!("c{c}") }),
                "controller_recovery" => end(&mut self.rng, &mut self.controllers_down)
                    .map(|c| External::ControllerRestart { controller: format!("c{c}") }),
                "partition" => begin(&mut self.rng, &mut self.partitioned, self.relays.clone())
                    .map(|relay| External::Partition { relay }),
                "policy" => {
                    let ready: Vec<(String, String)> = self
                        .policies
                        .iter()
                        .filter(|(_, after, _)| after.iter().all(|a| self.applied.contains(a)))
                        .map(|(n, _, c)| (n.clone(), c.clone()))
                        .collect();
                    let chosen = self.pick(&ready);
                    if let Some((n, _)) = &chosen {
                        self.applied.insert(n.clone());
                    }
                    chosen.map(|(name, c)| External::Policy { name, controller: Some(c) })
                }
                "partition_heal" => {
                    end(&mut self.rng, &mut self.partitioned).map(|relay| External::PartitionHeal { relay })
                }
                "message_drop" | "message_delay" | "message_reorder" => {
                    let switches: Vec<u64> = net.switches.keys().copied().collect();
                    // Checked with the config: every name is a message type.
                    let types: Vec<MsgType> =
                        self.rates.message_types.iter().filter_map(|t| MsgType::from_name(t)).collect();
                    let ms = self.rates.delay_ms;
                    match (self.pick(&switches), self.pick(&types)) {
                        (Some(switch), Some(msg_type)) if name == "message_drop" => {
                            Some(External::ControlDrop { switch, msg_type })
                        }
                        (Some(switch), Some(msg_type)) if name == "message_delay" => {
                            Some(External::ControlDelayNext { switch, msg_type, ms })
                        }
                        (Some(switch), Some(msg_type)) => Some(External::ControlReorderNext { switch, msg_type, ms }),
                        _ => None,
                    }
                }
                _ => None,
            };
            out.extend(e);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sts_mocknet::Topology;

    /// An input is looked up in the network once: what it names comes back
    /// resolved, and what does not exist is an error naming it.
    #[test]
    fn inputs_resolve_once_to_what_they_name() {
        let net = Network::new(&Topology::linear(3), 4);
        let resolve = |e: &External| resolve(&net, 1, &["r".to_string()], &[], e).map(|r| format!("{r:?}"));
        let ping = External::Ping { src: "h1".into(), dst: "h3".into() };
        assert_eq!(resolve(&ping).unwrap(), "Ping { src: 0, dst: 2 }");
        let port = |switch, port| Port { switch, port };
        let down = External::LinkDown { a: port(1, 2), b: port(2, 2) };
        assert!(resolve(&down).unwrap().starts_with("Link { at: Switch { dpid: 1, port: 2 }, up: false"));
        let nowhere = External::LinkDown { a: port(1, 2), b: port(3, 2) };
        assert_eq!(resolve(&nowhere).unwrap_err(), InputError::NotLinked { a: port(1, 2), b: port(3, 2) });
        assert_eq!(resolve(&nowhere).unwrap_err().to_string(), "s1:2 and s3:2 are not linked in this topology");
        let migrate = External::HostMigrate { host: "h2".into(), from: 2, to: 9 };
        assert_eq!(resolve(&migrate).unwrap_err(), InputError::NoSwitch(9));
        let crash = External::ControllerCrash { controller: "c1".into() };
        assert_eq!(resolve(&crash).unwrap_err(), InputError::NoController { name: "c1".into(), count: 1 });
        assert_eq!(resolve(&crash).unwrap_err().to_string(), "no controller named \"c1\" (controllers are c0..c0)");
        let policy = External::Policy { name: "p".into(), controller: None };
        assert!(resolve(&policy).unwrap_err().to_string().contains("(there are: none)"));
        let heal = External::PartitionHeal { relay: "r".into() };
        assert_eq!(resolve(&heal).unwrap(), r#"Partition { relay: "r", blocked: false }"#);
    }

    #[test]
    fn the_same_seed_chooses_the_same_events() {
        let mut t = Topology::mesh(4);
        t.place_hosts(&[1, 2, 3, 4]);
        let net = Network::new(&t, 4);
        let rates = Rates {
            traffic: 0.5,
            link_failure: 0.2,
            link_recovery: 0.3,
            host_migration: 0.1,
            dataplane_drop: 0.1,
            dataplane_drop_end: 0.3,
            dataplane_delay: 0.1,
            dataplane_delay_end: 0.3,
            switch_failure: 0.05,
            switch_recovery: 0.3,
            control_delay: 0.1,
            control_delay_end: 0.3,
            controller_crash: 0.05,
            controller_recovery: 0.3,
            partition: 0.2,
            partition_heal: 0.3,
            message_drop: 0.05,
            message_delay: 0.05,
            message_reorder: 0.05,
            policy: 0.2,
            delay_ms: 100,
            message_types: vec!["flow_mod".into(), "packet_out".into()],
        };
        let run = |seed| {
            let mut f = Fuzzer::new(seed, rates.clone(), 2);
            (0..200).flat_map(|_| f.step(&net)).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        for kind in [
            "ping",
            "link down",
            "link up",
            "migrate",
            "dataplane drop",
            "dataplane delay",
            "switch",
            "control",
            "controller c",
            "drop the next",
            "delay the next",
            "let later messages overtake",
        ] {
            assert!(a.iter().any(|e| e.describe().starts_with(kind)), "no {kind} in 200 steps");
        }
        assert!(
            !a.iter().any(|e| matches!(e, External::Partition { .. } | External::PartitionHeal { .. })),
            "no relays, no partitions"
        );

        // Without relays the partition rates draw nothing: the choices equal
        // those of a config without them (older seeds keep their runs).
        let without = Rates { partition: 0.0, partition_heal: 0.0, ..rates.clone() };
        let mut f = Fuzzer::new(7, without, 2);
        assert_eq!(a, (0..200).flat_map(|_| f.step(&net)).collect::<Vec<_>>());

        // A controller it may not crash (a remote one) is never crashed;
        // the others still are.
        let mut f = Fuzzer::new(7, rates.clone(), 2).without_crashing(&[0]);
        let crashes: Vec<External> =
            (0..200).flat_map(|_| f.step(&net)).filter(|e| matches!(e, External::ControllerCrash { .. })).collect();
        assert!(!crashes.is_empty());
        assert!(crashes.iter().all(|e| matches!(e, External::ControllerCrash { controller } if controller == "c1")));

        // With relays: partitions of configured relays, each healed only after it began.
        let mut f = Fuzzer::new(7, rates.clone(), 2).with_relays(vec!["c1-c0".into(), "c0-c1".into()]);
        let events: Vec<External> = (0..200).flat_map(|_| f.step(&net)).collect();
        let mut blocked = BTreeSet::new();
        let mut partitions = 0;
        for e in &events {
            match e {
                External::Partition { relay } => {
                    assert!(blocked.insert(relay.clone()), "{relay} partitioned twice");
                    partitions += 1;
                }
                External::PartitionHeal { relay } => {
                    assert!(blocked.remove(relay), "{relay} healed while not partitioned")
                }
                _ => {}
            }
        }
        assert!(partitions >= 5, "{partitions} partitions in 200 steps");

        // Policies only when the config has some (none above); one that
        // must come after another never comes first.
        assert!(!events.iter().any(|e| matches!(e, External::Policy { .. })));
        let policy = crate::config::PolicyConfig::named;
        let mut f = Fuzzer::new(7, rates.clone(), 2).with_policies(&[policy("undo", &["do"]), policy("do", &[])]);
        let names: Vec<String> = (0..200)
            .flat_map(|_| f.step(&net))
            .filter_map(|e| match e {
                External::Policy { name, .. } => Some(name),
                _ => None,
            })
            .collect();
        let first_do = names.iter().position(|n| n == "do").expect("do applied");
        let first_undo = names.iter().position(|n| n == "undo").expect("undo applied");
        assert!(first_do < first_undo, "{names:?}");
    }
}
