//! What the invariant checker needs to know beyond the forwarding state:
//! which controllers are alive, which switches lost their controllers, what
//! the dataplane and the controllers' logs said since the last check.

use std::collections::BTreeSet;

use sts_invariants::check::{ControllerState, Facts};
use sts_mocknet::DataplaneEvent;
use sts_proxy::interpose::Direction;

use crate::controller::Controller;
use crate::netrun::NetRunner;
use crate::session::Session;
use crate::trace::Internal;

/// The name a controller goes by in violations and traces: `c0`, `c1` ... in
/// config order.
pub fn controller_name(index: usize) -> String {
    format!("c{index}")
}

/// Gathers the facts for one check of a session. `dataplane` and
/// `log_lines` are what happened since the previous check (the caller also
/// records them).
pub fn facts(session: &mut Session, dataplane: Vec<DataplaneEvent>, log_lines: Vec<(String, String)>) -> Facts {
    facts_of(&session.runner, &mut session.controllers, &session.crashed, dataplane, log_lines)
}

/// The same from the parts: controllers in `crashed` were crashed on purpose
/// (a fuzzer input) and are not liveness failures.
pub fn facts_of(
    runner: &NetRunner,
    controllers: &mut [Controller],
    crashed: &BTreeSet<usize>,
    dataplane: Vec<DataplaneEvent>,
    log_lines: Vec<(String, String)>,
) -> Facts {
    Facts {
        controllers: controllers
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| !crashed.contains(i))
            .map(|(i, c)| ControllerState { name: controller_name(i), alive: c.is_alive() })
            .collect(),
        disconnected: runner.disconnected(),
        dataplane,
        log_lines,
    }
}

/// Everything observed since the last drain, taken out of the runner and the
/// controllers: internal events for the trace (with their times), and the
/// raw material of the next check.
pub struct Drained {
    pub internal: Vec<(u64, Internal)>,
    pub dataplane: Vec<DataplaneEvent>,
    pub log_lines: Vec<(String, String)>,
}

/// Takes the interposer's log (keepalives left out), the controllers' output
/// lines and the dataplane's reports.
pub fn drain(runner: &mut NetRunner, controllers: &[Controller]) -> Drained {
    let now = runner.clock.now();
    let mut internal = Vec::new();
    for r in runner.interposer.take_log() {
        if matches!(r.msg_type, "echo_request" | "echo_reply") {
            continue;
        }
        let dir = match r.dir {
            Direction::SwitchToController => "to_controller",
            Direction::ControllerToSwitch => "to_switch",
        };
        let e = Internal::Openflow { dpid: r.channel.dpid, controller: r.channel.controller, dir: dir.into(), msg: r.msg_type.into(), fp: r.fingerprint().0 };
        internal.push((r.time_ms, e));
    }
    let mut log_lines = Vec::new();
    for (i, c) in controllers.iter().enumerate() {
        for l in c.take_log_lines() {
            log_lines.push((controller_name(i), l.line.clone()));
            internal.push((now, Internal::Log { controller: controller_name(i), line: l.line, fp: l.fingerprint }));
        }
    }
    let dataplane = std::mem::take(&mut runner.net.events);
    for e in &dataplane {
        internal.push((now, Internal::Dataplane { what: format!("{e:?}") }));
    }
    internal.sort_by_key(|(t, _)| *t);
    Drained { internal, dataplane, log_lines }
}
