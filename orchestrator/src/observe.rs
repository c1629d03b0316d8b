//! What the invariant checker needs to know beyond the forwarding state:
//! which controllers are alive, which switches lost their controllers, what
//! the dataplane and the controllers' logs said since the last check.

use sts_invariants::check::{ControllerState, Facts};
use sts_mocknet::DataplaneEvent;

use crate::controller::Controller;
use crate::netrun::NetRunner;

/// The name a controller goes by in violations and traces: `c0`, `c1` ... in
/// config order.
pub fn controller_name(index: usize) -> String {
    format!("c{index}")
}

/// Gathers the facts for one check. `dataplane` and `log_lines` are what
/// happened since the previous check (the caller also records them).
pub fn facts(runner: &NetRunner, controllers: &mut [Controller], dataplane: Vec<DataplaneEvent>, log_lines: Vec<(String, String)>) -> Facts {
    Facts {
        controllers: controllers.iter_mut().enumerate().map(|(i, c)| ControllerState { name: controller_name(i), alive: c.is_alive() }).collect(),
        disconnected: runner.disconnected(),
        dataplane,
        log_lines,
    }
}
