//! Experiment configuration (TOML). Documented with examples in `examples/`.
//!
//! ```toml
//! [network]
//! topology = "linear"   # linear | star | mesh | tree | fat-tree | custom | file
//! size = 3              # switches (linear, mesh), leaves (star), k (fat-tree)
//! depth = 2             # tree only
//! fanout = 2            # tree only
//! switches = 4          # custom only: switches 1..=switches
//! links = [[1, 2], [2, 3], [3, 4]]   # custom only: switch-to-switch links
//! file = "dumbbell.topo"   # file only: a topology file next to the config
//!                       # (docs/topology-format.md)
//! hosts = [1, 1, 4]     # any shape: one host per entry, on that switch (h1, h2 ...);
//!                       # without it each shape places its own (see mocknet::topology)
//! openflow = "1.3"      # "1.0" or "1.3"
//! table_capacity = 100000   # entries per flow table before TABLE_FULL
//! packet_buffers = 0    # frames each switch buffers for PACKET_INs cut to
//!                       # max_len (0: none, whole frames, as Open vSwitch)
//!
//! [[controllers]]
//! kind = "os-ken"       # os-ken | ryu | faucet | c65faucet | cerberus | ovs-testcontroller | command
//! apps = ["os_ken.app.simple_switch_13"]   # os-ken and ryu (ryu.app....); a .py file is found next to the config
//! args = []             # os-ken, ryu, cerberus, ovs-testcontroller: extra options ({aux_port} ...)
//! command = []          # command: program and arguments ({port}, {address} ...)
//! env = {}              # command: environment
//! start_timeout_ms = 30000
//! snapshot = true       # fork each run's copy from a parked pristine one (LD_PRELOAD
//!                       # shim; docs/snapshots.md); default true except for command
//! setup = [             # once its switches are connected, after each restart, in
//!                       # each fresh copy: REST calls to 127.0.0.1:{aux_port} or
//!                       # commands ({port} {aux_port} {pid} {dir}); a failure stops the run
//!   { http = "PUT /firewall/module/enable/all" },
//!   { http = "POST /firewall/rules/all", body = '{"dl_type": "IPv4", "actions": "ALLOW"}' },
//!   { command = ["kill", "-HUP", "{pid}"], timeout_ms = 10000 },
//! ]
//!
//! [[policies]]          # named policy changes: the `policy` input applies one
//! name = "deny-h1"      # letters, digits, - and _
//! controller = "c0"     # whose {aux_port}, {pid} ... (default c0)
//! http = "POST /firewall/rules/all"   # or command = [...], as a setup step
//! body = '{"nw_src": "10.0.0.1/32", "actions": "DENY"}'
//! after = ["allow-all"] # skipped unless these were applied earlier in the run
//! isolate = [["h1", "h2"]]   # pairs that must not communicate from now on
//! allow = []            # pairs allowed again (undoing an isolate)
//!
//! [pingall]
//! min_wait_ms = 0       # wait at least this long before pinging (STP convergence ...)
//! settle_ms = 20000     # longest wait for handshakes and the controllers to go quiet
//! quiet_ms = 1000       # how long "quiet" is
//! ping_timeout_ms = 2000
//! attempts = 2
//! payload_bytes = 8     # ICMP echo payload (like ping -s), up to 1472
//!
//! [fuzz]                # sts fuzz
//! seed = 1              # the same seed and config give the same inputs
//! steps = 200           # the budget of fuzzing steps
//! step_ms = 100         # time between steps (run's clock: virtual with [time] virtual)
//! warmup_ms = 1000      # quiet time after the handshakes, before the first step
//!
//! [fuzz.rates]          # per step, the probability of each input (independent)
//! traffic = 0.5         # a ping between two random hosts
//! link_failure = 0.02   # a random live switch-to-switch link fails
//! link_recovery = 0.1   # a failed link recovers
//! host_migration = 0.02 # a random host moves to a random other switch
//! dataplane_drop = 0.0  # a random link starts dropping every frame
//! dataplane_drop_end = 0.1   # a dropping link heals
//! dataplane_delay = 0.0 # a random link starts delaying every frame by delay_ms
//! dataplane_delay_end = 0.1
//! switch_failure = 0.0  # a random switch crashes (connections, links, flow tables)
//! switch_recovery = 0.1 # a failed switch comes back and reconnects
//! control_delay = 0.0   # controller-to-switch messages of a random switch held delay_ms
//! control_delay_end = 0.1
//! controller_crash = 0.0     # a random controller is killed (SIGKILL)
//! controller_recovery = 0.1  # a crashed controller starts again; switches reconnect
//! partition = 0.0       # a random [[relays]] entry blocks: its controllers are partitioned
//! partition_heal = 0.1  # a blocked relay heals (both drawn only if relays exist)
//! policy = 0.0          # one of [[policies]] whose `after` ones came before
//! delay_ms = 100
//! # not yet: TCAM reordering
//!
//! [[relays]]            # controller-to-controller links sts can partition
//! name = "c0-c1"        # letters, digits, - and _
//! to = "127.0.0.1:9001" # where the relay forwards (a peer's cluster port);
//!                       # `{relay:c0-c1}` in a controller's command, args or
//!                       # env becomes the relay's own address
//!
//! [invariants]
//! check = ["loop", "blackhole", "liveness"]   # see docs/invariants.md
//! check_every_ms = 500  # how often the checker runs
//! persist_ms = 1000     # a violation counts once it lasts this long
//! same = "culprit"      # when two violations are the same bug: kind, culprit
//!                       # (default), victim or exact (docs/invariants.md)
//! isolation = [["h1", "h2"]]   # host pairs that must not communicate
//!
//! [time]
//! virtual = true        # run controllers and network on virtual time: when all is idle,
//!                       # time jumps to the next timer (docs/virtual-time.md);
//!                       # default true, false if a controller is `command`
//! jump_log = false      # write every jump into jumps.jsonl beside the controller logs
//!
//! [interpose]
//! epsilon_ms = 200      # replay: extra wait for an expected internal event
//! whitelist = ["echo_request", "echo_reply"]   # message types never held or delayed
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sts_mocknet::Topology;

/// A whole experiment config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub network: NetworkConfig,
    #[serde(default)]
    pub controllers: Vec<ControllerConfig>,
    #[serde(default)]
    pub pingall: PingallConfig,
    #[serde(default)]
    pub fuzz: FuzzConfig,
    #[serde(default)]
    pub invariants: InvariantsConfig,
    #[serde(default)]
    pub interpose: InterposeConfig,
    #[serde(default)]
    pub relays: Vec<RelayConfig>,
    #[serde(default)]
    pub time: TimeConfig,
    /// Named policy changes (`[[policies]]`): the `policy` input applies one.
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
    /// The directory of the config file: relative app paths (`apps =
    /// ["my_app.py"]`) are resolved against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// Fingerprint masks learned for this experiment (`DIR/masks.json`,
    /// `sts learn`), set when an experiment is loaded for replay.
    #[serde(skip)]
    pub masks: Option<sts_trace::masks::Masks>,
    /// Particular OpenFlow messages the proxy drops in this run
    /// (message-level minimization, [`crate::internal`]).
    #[serde(skip)]
    pub drop_ids: std::collections::BTreeSet<sts_proxy::interpose::MessageId>,
}

/// The `[time]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeConfig {
    /// Run the controllers and the network on virtual time
    /// (`docs/virtual-time.md`): when everything is idle, time jumps to the
    /// next timer instead of being waited for. Needs the shim in every
    /// controller process; without it runs stay on real time. Default
    /// ([`Config::virtual_time`]): on unless a controller is `command` or
    /// `remote`.
    #[serde(rename = "virtual")]
    pub virtual_time: Option<bool>,
    /// On virtual time: the wall-clock date (ns since the Unix epoch) the
    /// run's clock starts at, instead of today's. Not read from files: a
    /// replay sets it from the trace it replays, so its controllers see the
    /// dates the recorded run's controllers saw.
    #[serde(skip)]
    pub wall_epoch_ns: Option<u64>,
    /// On virtual time: write every jump (from, to, what every controller
    /// process and sts were doing) into `jumps.jsonl` next to the
    /// controller logs (`docs/virtual-time.md`). Off by default; the same
    /// goes to the debug log (`RUST_LOG=sts_engine::clock=debug`).
    pub jump_log: bool,
}

/// The `[fuzz]` table.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FuzzConfig {
    pub seed: u64,
    pub steps: u32,
    pub step_ms: u64,
    pub warmup_ms: u64,
    pub rates: Rates,
}

impl Default for FuzzConfig {
    fn default() -> Self {
        FuzzConfig { seed: 1, steps: 200, step_ms: 100, warmup_ms: 1_000, rates: Rates::default() }
    }
}

/// `[fuzz.rates]`: per step, the probability of each input.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rates {
    pub traffic: f64,
    pub link_failure: f64,
    pub link_recovery: f64,
    pub host_migration: f64,
    pub dataplane_drop: f64,
    pub dataplane_drop_end: f64,
    pub dataplane_delay: f64,
    pub dataplane_delay_end: f64,
    pub switch_failure: f64,
    pub switch_recovery: f64,
    pub control_delay: f64,
    pub control_delay_end: f64,
    pub controller_crash: f64,
    pub controller_recovery: f64,
    pub partition: f64,
    pub partition_heal: f64,
    /// A message-level fault: the proxy drops the next message of one of
    /// `message_types` to or from a random switch.
    pub message_drop: f64,
    /// A message-level fault: the proxy delays the next message of one of
    /// `message_types` to or from a random switch by `delay_ms`.
    pub message_delay: f64,
    /// A message-level fault: the next message of one of `message_types`
    /// to or from a random switch comes `delay_ms` late, the ones after it
    /// overtaking it.
    pub message_reorder: f64,
    /// A policy change: one of the config's `[[policies]]` whose `after`
    /// policies were applied already.
    pub policy: f64,
    /// How long dataplane and control delays hold things, in milliseconds.
    pub delay_ms: u64,
    /// The OpenFlow message types `message_drop`, `message_delay` and
    /// `message_reorder` pick from (snake_case
    /// names: `flow_mod`, `packet_out`, `packet_in` ...).
    pub message_types: Vec<String>,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            traffic: 0.5,
            link_failure: 0.02,
            link_recovery: 0.1,
            host_migration: 0.02,
            dataplane_drop: 0.0,
            dataplane_drop_end: 0.1,
            dataplane_delay: 0.0,
            dataplane_delay_end: 0.1,
            switch_failure: 0.0,
            switch_recovery: 0.1,
            control_delay: 0.0,
            control_delay_end: 0.1,
            controller_crash: 0.0,
            controller_recovery: 0.1,
            partition: 0.0,
            partition_heal: 0.1,
            message_drop: 0.0,
            message_delay: 0.0,
            message_reorder: 0.0,
            policy: 0.0,
            delay_ms: 100,
            message_types: vec!["flow_mod".into()],
        }
    }
}

impl Rates {
    /// Every rate with its name, in the order the fuzzer draws them.
    pub fn named(&self) -> [(&'static str, f64); 20] {
        [
            ("traffic", self.traffic),
            ("link_failure", self.link_failure),
            ("link_recovery", self.link_recovery),
            ("host_migration", self.host_migration),
            ("dataplane_drop", self.dataplane_drop),
            ("dataplane_drop_end", self.dataplane_drop_end),
            ("dataplane_delay", self.dataplane_delay),
            ("dataplane_delay_end", self.dataplane_delay_end),
            ("switch_failure", self.switch_failure),
            ("switch_recovery", self.switch_recovery),
            ("control_delay", self.control_delay),
            ("control_delay_end", self.control_delay_end),
            ("controller_crash", self.controller_crash),
            ("controller_recovery", self.controller_recovery),
            ("partition", self.partition),
            ("partition_heal", self.partition_heal),
            // Last: older seeds draw what they drew before it existed.
            ("message_drop", self.message_drop),
            ("message_delay", self.message_delay),
            ("message_reorder", self.message_reorder),
            ("policy", self.policy),
        ]
    }
}

/// One `[[relays]]` entry: a TCP relay between controller peers that
/// partitions can block (`proxy::relay`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    pub name: String,
    /// Where it forwards, `IP:PORT`.
    pub to: String,
}

impl RelayConfig {
    /// The placeholder controllers use for this relay's address.
    pub fn placeholder(&self) -> String {
        format!("{{relay:{}}}", self.name)
    }
}

/// The `[invariants]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InvariantsConfig {
    pub check: Vec<String>,
    pub check_every_ms: u64,
    pub persist_ms: u64,
    pub isolation: Vec<(String, String)>,
    /// When two violations are the same bug (persistence, replays,
    /// minimization; `sts minimize --same` overrides it).
    pub same: sts_invariants::Same,
}

impl Default for InvariantsConfig {
    fn default() -> Self {
        InvariantsConfig {
            check: vec!["loop".into(), "blackhole".into(), "liveness".into()],
            check_every_ms: 500,
            persist_ms: 1_000,
            isolation: vec![],
            same: sts_invariants::Same::default(),
        }
    }
}

/// The `[interpose]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InterposeConfig {
    pub epsilon_ms: u64,
    /// Message types that always pass straight through the proxy, whatever
    /// delay or hold is in force (keepalives by default: held too long, they
    /// make controllers drop switches).
    pub whitelist: Vec<String>,
}

impl Default for InterposeConfig {
    fn default() -> Self {
        InterposeConfig { epsilon_ms: 200, whitelist: vec!["echo_request".into(), "echo_reply".into()] }
    }
}

/// The `[network]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    pub topology: TopologyKind,
    #[serde(default = "default_size")]
    pub size: u64,
    #[serde(default = "default_two")]
    pub depth: u32,
    #[serde(default = "default_fanout")]
    pub fanout: u64,
    /// Custom topologies: the number of switches.
    pub switches: Option<u64>,
    /// Custom topologies: switch-to-switch links.
    pub links: Option<Vec<(u64, u64)>>,
    /// File topologies: the topology file, relative to the config's directory.
    pub file: Option<PathBuf>,
    /// File topologies: the file, parsed when the config is loaded.
    #[serde(skip)]
    pub file_topology: Option<Topology>,
    /// Host placement: one host per entry, on that switch.
    pub hosts: Option<Vec<u64>>,
    /// Flow entries each table holds before FLOW_MODs fail with TABLE_FULL.
    #[serde(default)]
    pub table_capacity: Option<usize>,
    /// Frames each switch can buffer (0: no buffering, as Open vSwitch).
    #[serde(default)]
    pub packet_buffers: usize,
    #[serde(default)]
    pub openflow: OpenFlowVersion,
}

fn default_size() -> u64 {
    3
}
fn default_two() -> u32 {
    2
}
fn default_fanout() -> u64 {
    2
}

/// Topology shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TopologyKind {
    Linear,
    Star,
    Mesh,
    Tree,
    FatTree,
    Custom,
    File,
}

/// OpenFlow versions the mock switches speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum OpenFlowVersion {
    #[serde(rename = "1.0")]
    V10,
    #[default]
    #[serde(rename = "1.3")]
    V13,
}

impl OpenFlowVersion {
    /// The wire version byte.
    pub fn wire(self) -> u8 {
        match self {
            OpenFlowVersion::V10 => sts_proxy::wire::OFP10,
            OpenFlowVersion::V13 => sts_proxy::wire::OFP13,
        }
    }
}

/// One `[[controllers]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerConfig {
    pub kind: ControllerKind,
    #[serde(default)]
    pub apps: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub start_timeout_ms: Option<u64>,
    /// Start each run from a pristine snapshot (a fork of a parked copy,
    /// `sts-shim`) instead of a new process. Default: on for every kind sts
    /// knows (os-ken, Ryu, faucet, c65faucet, Cerberus, ovs-testcontroller:
    /// measured to work), off for `command`.
    #[serde(default)]
    pub snapshot: Option<bool>,
    /// Steps run once the controller is ready (its switches connected), and
    /// again after each restart and in each fresh copy: REST calls or
    /// commands that put a REST-configured app into a meaningful state.
    #[serde(default)]
    pub setup: Vec<StepConfig>,
    /// `kind = "remote"`: the `host:port` of a controller sts does not start
    /// (already running, on this machine or another). sts connects the
    /// switches to it and records everything, but cannot crash, restart,
    /// snapshot or checkpoint it, and runs on real time.
    #[serde(default)]
    pub address: Option<String>,
}

/// One thing done to a controller from outside: an HTTP request to its REST
/// API, or a command. Exactly one of `http` and `command`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    /// `"METHOD /path"`: sent to `127.0.0.1:{aux_port}` (the controller's
    /// side port: give it to the REST API, e.g. `--wsapi-port {aux_port}`),
    /// or `"METHOD http://host:port/path"`. Any 2xx answer is success.
    pub http: Option<String>,
    /// The request body (JSON, usually).
    pub body: Option<String>,
    /// A program and its arguments; `{port}`, `{aux_port}`, `{pid}` and
    /// `{dir}` (the run's directory) are replaced. Exit status 0 is success.
    pub command: Option<Vec<String>>,
    /// How long the step may take (default 10 s; sts keeps the network
    /// running meanwhile).
    pub timeout_ms: Option<u64>,
}

impl StepConfig {
    /// Checks the step's shape; `what` names it in the error.
    fn validate(&self, what: &str) -> Result<(), String> {
        match (&self.http, &self.command) {
            (Some(h), None) => {
                let mut words = h.split_whitespace();
                let (Some(method), Some(target), None) = (words.next(), words.next(), words.next()) else {
                    return Err(format!(
                        "{what}.http = {h:?}: write \"METHOD /path\" (e.g. \"PUT /firewall/module/enable/all\")"
                    ));
                };
                if !method.chars().all(|c| c.is_ascii_uppercase()) {
                    return Err(format!(
                        "{what}.http = {h:?}: {method:?} is not an HTTP method (GET, PUT, POST, DELETE ...)"
                    ));
                }
                if !(target.starts_with('/') || target.starts_with("http://")) {
                    return Err(format!("{what}.http = {h:?}: the target is a path (/...) or an http:// URL"));
                }
                Ok(())
            }
            (None, Some(c)) if !c.is_empty() => {
                if self.body.is_some() {
                    return Err(format!("{what}: `body` goes with `http`, not `command`"));
                }
                Ok(())
            }
            (None, Some(_)) => Err(format!("{what}.command is empty: name a program")),
            (Some(_), Some(_)) => Err(format!("{what}: give `http` or `command`, not both")),
            (None, None) => Err(format!("{what}: give `http = \"METHOD /path\"` or `command = [...]`")),
        }
    }

    /// The step's time limit.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.unwrap_or(10_000))
    }

    /// A short description for errors and logs.
    pub fn describe(&self) -> String {
        match (&self.http, &self.command) {
            (Some(h), _) => h.clone(),
            (_, Some(c)) => c.join(" "),
            _ => String::new(),
        }
    }
}

/// One `[[policies]]` entry: a named policy change the `policy` input applies.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Letters, digits, `-` and `_`; the trace names the policy by it.
    pub name: String,
    /// The controller it is applied to: `c0` (default), `c1` ...
    #[serde(default = "first_controller")]
    pub controller: String,
    /// What is done, as in a `setup` step: `http` (with `body`) or `command`.
    pub http: Option<String>,
    pub body: Option<String>,
    pub command: Option<Vec<String>>,
    pub timeout_ms: Option<u64>,
    /// Policies that must have been applied earlier in the run for this one
    /// to make sense (a rule deleted after it was added); without them it is
    /// skipped. Minimization relies on it: a candidate that drops a
    /// prerequisite skips what depends on it.
    #[serde(default)]
    pub after: Vec<String>,
    /// Host pairs (`[from, to]`) that must not communicate once applied:
    /// checked by the isolation invariant, excused from blackholes.
    #[serde(default)]
    pub isolate: Vec<(String, String)>,
    /// Host pairs allowed again once applied (undoing an `isolate`).
    #[serde(default)]
    pub allow: Vec<(String, String)>,
}

impl PolicyConfig {
    /// A policy `PUT /NAME` on c0 that comes `after` others (for tests).
    #[cfg(test)]
    pub(crate) fn named(name: &str, after: &[&str]) -> PolicyConfig {
        PolicyConfig {
            name: name.into(),
            controller: "c0".into(),
            http: Some(format!("PUT /{name}")),
            body: None,
            command: None,
            timeout_ms: None,
            after: after.iter().map(|a| a.to_string()).collect(),
            isolate: vec![],
            allow: vec![],
        }
    }

    /// What applying the policy does.
    pub fn step(&self) -> StepConfig {
        StepConfig {
            http: self.http.clone(),
            body: self.body.clone(),
            command: self.command.clone(),
            timeout_ms: self.timeout_ms,
        }
    }
}

fn first_controller() -> String {
    "c0".into()
}

impl ControllerConfig {
    /// Whether runs start from a pristine snapshot.
    pub fn snapshot(&self) -> bool {
        self.kind != ControllerKind::Remote && self.snapshot.unwrap_or(self.kind != ControllerKind::Command)
    }

    /// Where a `remote` controller listens (validated with the config).
    pub fn remote_address(&self) -> Option<std::net::SocketAddr> {
        self.address.as_deref().and_then(|a| a.parse().ok())
    }
}

/// Kinds of controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ControllerKind {
    OsKen,
    /// Ryu 4.34, os-ken's parent (`.local/ryu`, installed by `scripts/setup`).
    Ryu,
    Faucet,
    /// c65faucet 1.0.106: faucet's application on c65of, a threaded OpenFlow
    /// 1.3 stack of its own (`.local/c65faucet`). Configured as faucet is.
    C65faucet,
    /// Cerberus 0.1.8, a proactive layer-2 controller on Ryu (fast-failover
    /// groups, no MAC learning; installed into `.local/ryu`). sts writes its
    /// topology.json from the network.
    Cerberus,
    OvsTestcontroller,
    Command,
    /// A controller sts does not start: it connects the switches to
    /// `address` (`ControllerConfig::address`).
    Remote,
}

/// The `[pingall]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PingallConfig {
    pub min_wait_ms: u64,
    pub settle_ms: u64,
    pub quiet_ms: u64,
    pub ping_timeout_ms: u64,
    pub attempts: u32,
    /// ICMP echo payload bytes per ping (like `ping -s`); frames longer than
    /// a controller's max_len are buffered by the switches.
    pub payload_bytes: usize,
}

/// The largest ping payload: a 1,500-byte IPv4 packet (no fragmentation).
pub const MAX_PING_PAYLOAD: usize = 1472;

impl Default for PingallConfig {
    fn default() -> Self {
        PingallConfig {
            min_wait_ms: 0,
            settle_ms: 20_000,
            quiet_ms: 1_000,
            ping_timeout_ms: 2_000,
            attempts: 2,
            payload_bytes: sts_mocknet::host::DEFAULT_PING_PAYLOAD,
        }
    }
}

/// The largest network a config may describe.
/// Ports an OpenFlow 1.0 switch can have: its FEATURES_REPLY (at most
/// 65,535 bytes, a 32-byte header) lists each in 48 bytes, and its LOCAL
/// port too.
pub const MAX_PORTS_10: usize = (65_535 - 32) / 48 - 1;

pub const MAX_SWITCHES: u64 = 100_000;

/// The most links (between switches) a network may have: bounded before
/// anything is built, since a mesh's links grow with the square of its
/// switches (a 20,000-switch mesh would be 200 million links). Room for the
/// largest network measured (docs/benchmarks.md: a k = 90 fat-tree, 364,500
/// links, 344 MiB in sts); a mesh reaches it at 1,415 switches.
pub const MAX_LINKS: u64 = 1_000_000;

/// The deepest tree topology (its building recurses once per level).
pub const MAX_TREE_DEPTH: u32 = 64;

/// A config that could not be used: the message names the file, the line and
/// the field.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_text_file(path).map_err(|message| ConfigError { path: path.to_owned(), message })?;
        Config::from_toml(&text, path)
    }

    /// Whether runs use virtual time: as `[time] virtual` says, else on when
    /// every controller is one sts knows to work with the shim (every kind
    /// but `command`, threaded c65faucet included), off with any `command`
    /// controller.
    pub fn virtual_time(&self) -> bool {
        self.time.virtual_time.unwrap_or_else(|| {
            !self.controllers.is_empty()
                && self.controllers.iter().all(|c| !matches!(c.kind, ControllerKind::Command | ControllerKind::Remote))
        })
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError {
            path: origin.to_owned(),
            // The user's text in it is bounded where it is quoted; the
            // list of valid keys is the schema's and is said whole.
            message: sts_trace::bounded_message(message, 2000),
        };
        let mut config: Config = toml::from_str(text).map_err(|e| err(describe_toml_error(text, &e)))?;
        config.base_dir = origin.parent().map(Path::to_path_buf).unwrap_or_default();
        config.load_topology_file().map_err(|m| err(at_line_of(text, "file", m)))?;
        config.validate().map_err(|m| err(at_field_line(text, m)))?;
        config.check_app_files(text).map_err(err)?;
        Ok(config)
    }

    /// Every `.py` app a controller names exists (relative to the config):
    /// a missing one is the config's fault, found before anything starts.
    fn check_app_files(&self, text: &str) -> Result<(), String> {
        for (i, c) in self.controllers.iter().enumerate() {
            for app in c.apps.iter().filter(|a| a.ends_with(".py")) {
                let path = self.base_dir.join(app);
                if !path.is_file() {
                    let shown = std::path::absolute(&path).unwrap_or(path);
                    let what = format!("controllers[{i}].apps: {app:?}: no such file (looked for {})", shown.display());
                    return Err(at_line_of(text, &format!("{app:?}"), what));
                }
            }
        }
        Ok(())
    }

    /// Reads and parses `network.file` for `topology = "file"`.
    fn load_topology_file(&mut self) -> Result<(), String> {
        let n = &mut self.network;
        match (n.topology, &n.file) {
            (TopologyKind::File, None) => {
                Err("network.file: topology = \"file\" needs the topology file's path".into())
            }
            (TopologyKind::File, Some(file)) => {
                let path = self.base_dir.join(file);
                let text = read_text_file(&path).map_err(|e| format!("network.file: {}: {e}", path.display()))?;
                let topo = Topology::parse(&text).map_err(|e| match e.line {
                    0 => format!("network.file: {}: {}", path.display(), e.message),
                    line => format!("network.file: {}:{line}: {}", path.display(), e.message),
                })?;
                n.file_topology = Some(topo);
                Ok(())
            }
            (_, Some(_)) => Err("network.file only applies to topology = \"file\"".into()),
            (_, None) => Ok(()),
        }
    }

    /// The config text to keep in an experiment directory, and the files to
    /// copy beside it ((path in the directory, source)), so that the
    /// directory loads wherever it is: a topology file named with `..` or an
    /// absolute path is copied in under its file name and the text points at
    /// the copy; an app `.py` named with `..` is pointed at by its absolute
    /// path (copied alone it would lose the modules it imports from beside
    /// it). The rest of the text is kept as written.
    pub fn portable(&self, text: &str) -> Result<(String, Vec<(PathBuf, PathBuf)>), String> {
        let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
        let mut files = self.local_files();
        let inside = |p: &Path| p.components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if let Some(file) = self.network.file.as_deref().map(Path::new).filter(|p| !inside(p)) {
            // Prefixed: it can be named nothing an experiment directory holds.
            let name = file
                .file_name()
                .map(|n| PathBuf::from(format!("topology-{}", n.to_string_lossy())))
                .ok_or_else(|| format!("network.file {file:?}: no file name"))?;
            doc["network"]["file"] = toml_edit::value(name.to_string_lossy().as_ref());
            files.push((name, self.base_dir.join(file)));
        }
        if let Some(controllers) = doc.get_mut("controllers").and_then(|c| c.as_array_of_tables_mut()) {
            for table in controllers.iter_mut() {
                let Some(apps) = table.get_mut("apps").and_then(|a| a.as_array_mut()) else { continue };
                for app in apps.iter_mut() {
                    let Some(path) = app.as_str().map(PathBuf::from) else { continue };
                    if path.extension().is_some_and(|e| e == "py") && path.is_relative() && !inside(&path) {
                        let absolute = std::fs::canonicalize(self.base_dir.join(&path))
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        *app = toml_edit::Value::from(absolute.to_string_lossy().as_ref());
                    }
                }
            }
        }
        Ok((doc.to_string(), files))
    }

    /// Files next to the config that a run needs (relative .py apps, the
    /// topology file), as written in the config and as resolved: an
    /// experiment directory keeps a copy of each so it replays on its own.
    pub fn local_files(&self) -> Vec<(PathBuf, PathBuf)> {
        let apps = self.controllers.iter().flat_map(|c| &c.apps).filter(|a| a.ends_with(".py")).map(PathBuf::from);
        apps.chain(self.network.file.clone())
            .filter(|p| p.is_relative() && p.components().all(|c| matches!(c, std::path::Component::Normal(_))))
            .map(|p| (p.clone(), self.base_dir.join(&p)))
            .collect()
    }

    fn validate_policies(&self) -> Result<(), String> {
        let mut names = BTreeSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let what = format!("policies[{i}]");
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(format!("{what}.name = {:?}: use letters, digits, - and _", p.name));
            }
            if !names.insert(p.name.as_str()) {
                return Err(format!("{what}.name = {:?}: another policy has this name", p.name));
            }
            let known = p
                .controller
                .strip_prefix('c')
                .and_then(|k| k.parse::<usize>().ok())
                .is_some_and(|k| k < self.controllers.len() && p.controller == format!("c{k}"));
            if !known {
                return Err(format!(
                    "{what}.controller = {:?}: controllers are c0..c{}",
                    p.controller,
                    self.controllers.len().saturating_sub(1)
                ));
            }
            p.step().validate(&what)?;
        }
        let hosts: Vec<String> = if self.policies.iter().any(|p| !p.isolate.is_empty() || !p.allow.is_empty()) {
            self.topology().hosts.iter().map(|h| h.name.clone()).collect()
        } else {
            vec![]
        };
        for (i, p) in self.policies.iter().enumerate() {
            for a in &p.after {
                if a == &p.name {
                    return Err(format!("policies[{i}].after names the policy itself ({a:?})"));
                }
                if !names.contains(a.as_str()) {
                    return Err(format!("policies[{i}].after: no policy named {a:?}"));
                }
            }
            for (field, pairs) in [("isolate", &p.isolate), ("allow", &p.allow)] {
                for h in pairs.iter().flat_map(|(a, b)| [a, b]) {
                    if !hosts.contains(h) {
                        return Err(format!("policies[{i}].{field}: no host named {h:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), String> {
        if self.time.virtual_time == Some(true) && self.controllers.iter().any(|c| c.kind == ControllerKind::Remote) {
            return Err("time.virtual: a remote controller runs on its own machine's time; virtual time needs \
                        every controller started by sts (set virtual = false, or leave it out)"
                .into());
        }
        let n = &self.network;
        if n.topology == TopologyKind::Custom {
            let Some(count) = n.switches.filter(|&c| c > 0) else {
                return Err("network.switches: a custom topology needs the number of switches (at least 1)".into());
            };
            for (i, &(a, b)) in n.links.iter().flatten().enumerate() {
                if a == b || a == 0 || b == 0 || a > count || b > count {
                    return Err(format!(
                        "network.links[{i}] = [{a}, {b}]: each end must be a different switch in 1..={count}"
                    ));
                }
            }
        } else if n.switches.is_some() || n.links.is_some() {
            return Err("network.switches and network.links only apply to topology = \"custom\"".into());
        }
        if n.topology == TopologyKind::Tree && n.depth > MAX_TREE_DEPTH {
            return Err(format!("network.depth = {}: at most {MAX_TREE_DEPTH}", n.depth));
        }
        let sized = match n.topology {
            TopologyKind::Tree => "network.depth",
            TopologyKind::Custom => "network.switches",
            TopologyKind::File => "network.file",
            _ => "network.size",
        };
        let switch_count = self.switch_count().filter(|&c| c <= MAX_SWITCHES).ok_or_else(|| {
            format!("{sized}: this topology would have more than {MAX_SWITCHES} switches; sts is measured up to about 10,000 (docs/benchmarks.md)")
        })?;
        match self.link_count() {
            Some(links) if links <= MAX_LINKS => {}
            links => {
                let shown = links.map_or_else(|| "more than 2^64".to_string(), |l| l.to_string());
                return Err(format!(
                    "{sized}: this topology would have {shown} links between switches, more than the {MAX_LINKS} \
                     sts builds (a mesh of n switches has n(n-1)/2)"
                ));
            }
        }
        for (i, &s) in n.hosts.iter().flatten().enumerate() {
            if s == 0 || s > switch_count {
                return Err(format!("network.hosts[{i}] = {s}: no such switch (switches are 1..={switch_count})"));
            }
        }
        if n.openflow == OpenFlowVersion::V10 {
            // A 1.0 switch lists its ports in its FEATURES_REPLY, one message.
            let t = self.topology();
            let mut ports: BTreeMap<u64, usize> = BTreeMap::new();
            for s in t.hosts.iter().map(|h| h.switch).chain(t.links.iter().flat_map(|&(a, b)| [a, b])) {
                *ports.entry(s).or_default() += 1;
            }
            if let Some((s, count)) = ports.into_iter().find(|&(_, count)| count > MAX_PORTS_10) {
                return Err(format!(
                    "network: switch s{s} would have {count} ports; an OpenFlow 1.0 switch describes all its \
                     ports in one FEATURES_REPLY, which holds at most {MAX_PORTS_10}: use openflow = \"1.3\" \
                     or fewer hosts per switch"
                ));
            }
        }
        match n.topology {
            TopologyKind::FatTree if n.size < 2 || n.size % 2 == 1 => {
                return Err(format!("network.size: fat-tree needs an even k >= 2, got {}", n.size))
            }
            TopologyKind::Tree if n.depth == 0 || n.fanout == 0 => {
                return Err("network.depth and network.fanout must be at least 1".into())
            }
            _ if n.size == 0 => return Err("network.size must be at least 1".into()),
            _ => {}
        }
        for (name, rate) in self.fuzz.rates.named() {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("fuzz.rates.{name} = {rate}: a rate is a probability per step, between 0 and 1"));
            }
        }
        if n.packet_buffers > 65_536 {
            return Err(format!("network.packet_buffers = {}: at most 65536 per switch", n.packet_buffers));
        }
        if self.pingall.payload_bytes > MAX_PING_PAYLOAD {
            return Err(format!(
                "pingall.payload_bytes = {}: at most {MAX_PING_PAYLOAD} (a 1,500-byte packet; hosts do not fragment)",
                self.pingall.payload_bytes
            ));
        }
        if self.fuzz.step_ms == 0 {
            return Err("fuzz.step_ms must be at least 1".into());
        }
        for (i, name) in self.invariants.check.iter().enumerate() {
            if sts_invariants::Invariant::from_name(name).is_none() {
                let known: Vec<&str> = sts_invariants::Invariant::ALL.iter().map(|i| i.name()).collect();
                return Err(format!(
                    "invariants.check[{i}] = {name:?}: unknown invariant (known: {})",
                    known.join(", ")
                ));
            }
        }
        if self.invariants.check_every_ms == 0 {
            return Err("invariants.check_every_ms must be at least 1".into());
        }
        let host_names: Vec<String> = if self.invariants.isolation.is_empty() {
            vec![]
        } else {
            self.topology().hosts.iter().map(|h| h.name.clone()).collect()
        };
        for (i, (a, b)) in self.invariants.isolation.iter().enumerate() {
            for h in [a, b] {
                if !host_names.contains(h) {
                    return Err(format!("invariants.isolation[{i}]: no host named {h:?}"));
                }
            }
        }
        if self.controllers.is_empty() {
            return Err("no [[controllers]]: at least one controller is needed".into());
        }
        for (i, c) in self.controllers.iter().enumerate() {
            for (k, step) in c.setup.iter().enumerate() {
                step.validate(&format!("controllers[{i}].setup[{k}]"))?;
            }
        }
        self.validate_policies()?;
        let mut relay_names = BTreeSet::new();
        for (i, r) in self.relays.iter().enumerate() {
            if r.name.is_empty() || !r.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(format!("relays[{i}].name = {:?}: use letters, digits, - and _", r.name));
            }
            if !relay_names.insert(r.name.as_str()) {
                return Err(format!("relays[{i}].name = {:?}: two relays have this name", r.name));
            }
            r.to.parse::<std::net::SocketAddr>()
                .map_err(|e| format!("relays[{i}].to = {:?}: {e} (expected IP:PORT)", r.to))?;
        }
        for (i, c) in self.controllers.iter().enumerate() {
            let texts = c.command.iter().chain(&c.args).chain(c.env.values());
            for t in texts {
                for (at, _) in t.match_indices("{relay:") {
                    let name = t[at + 7..].split('}').next().unwrap_or("");
                    if !relay_names.contains(name) {
                        return Err(format!("controllers[{i}]: {{relay:{name}}} names no [[relays]] entry"));
                    }
                }
            }
        }
        for (i, c) in self.controllers.iter().enumerate() {
            match c.kind {
                ControllerKind::OsKen if c.apps.is_empty() => {
                    return Err(format!("controllers[{i}].apps: os-ken needs at least one app"))
                }
                ControllerKind::Ryu if c.apps.is_empty() => {
                    return Err(format!(
                        "controllers[{i}].apps: ryu needs at least one app (ryu.app.simple_switch_13 ...)"
                    ))
                }
                ControllerKind::Cerberus
                | ControllerKind::Faucet
                | ControllerKind::C65faucet
                | ControllerKind::OvsTestcontroller
                    if !c.apps.is_empty() =>
                {
                    return Err(format!(
                        "controllers[{i}].apps: only os-ken and ryu run apps; this controller is one program"
                    ))
                }
                ControllerKind::Command if c.command.is_empty() => {
                    return Err(format!("controllers[{i}].command: a command controller needs a program"))
                }
                ControllerKind::Remote if c.remote_address().is_none() => {
                    return Err(format!(
                        "controllers[{i}].address: a remote controller needs the address it listens on, as \
                         IP:PORT (\"127.0.0.1:6653\"); found {:?}",
                        c.address.as_deref().unwrap_or("nothing")
                    ))
                }
                ControllerKind::Remote
                    if !c.apps.is_empty()
                        || !c.command.is_empty()
                        || !c.args.is_empty()
                        || c.snapshot == Some(true) =>
                {
                    return Err(format!(
                        "controllers[{i}]: a remote controller is not started by sts: it takes only `address` \
                         (and `setup`), not apps, args, command or snapshot"
                    ))
                }
                _ if c.kind != ControllerKind::Remote && c.address.is_some() => {
                    return Err(format!(
                        "controllers[{i}].address: only a `remote` controller has an address (sts chooses the \
                         others' ports)"
                    ))
                }
                ControllerKind::Faucet | ControllerKind::C65faucet | ControllerKind::Cerberus
                    if n.openflow != OpenFlowVersion::V13 =>
                {
                    let name = match c.kind {
                        ControllerKind::Faucet => "faucet",
                        ControllerKind::C65faucet => "c65faucet",
                        _ => "cerberus",
                    };
                    return Err(format!(
                        "controllers[{i}]: {name} speaks only OpenFlow 1.3; set network.openflow = \"1.3\""
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The number of links between switches the topology has, by
    /// arithmetic (nothing is built); None when it overflows.
    fn link_count(&self) -> Option<u64> {
        let n = &self.network;
        match n.topology {
            TopologyKind::Linear => Some(n.size.saturating_sub(1)),
            TopologyKind::Mesh => n.size.checked_mul(n.size.saturating_sub(1)).map(|x| x / 2),
            TopologyKind::Star => Some(n.size),
            TopologyKind::Tree => self.switch_count().map(|s| s.saturating_sub(1)),
            // Edge-aggregation and aggregation-core: k^3/4 each.
            TopologyKind::FatTree => n.size.checked_pow(3).map(|x| x / 2),
            TopologyKind::Custom => Some(n.links.as_ref().map_or(0, |l| l.len() as u64)),
            TopologyKind::File => n.file_topology.as_ref().map(|t| t.links.len() as u64),
        }
    }

    /// How many switches the `[network]` table describes, computed without
    /// building anything (`None` on overflow).
    fn switch_count(&self) -> Option<u64> {
        let n = &self.network;
        match n.topology {
            TopologyKind::Linear | TopologyKind::Mesh => Some(n.size),
            TopologyKind::Star => n.size.checked_add(1),
            TopologyKind::Tree => {
                (0..n.depth).try_fold(0u64, |acc, level| acc.checked_add(n.fanout.checked_pow(level)?))
            }
            TopologyKind::FatTree => n.size.checked_mul(n.size)?.checked_mul(5).map(|x| x / 4),
            TopologyKind::Custom => n.switches,
            TopologyKind::File => n.file_topology.as_ref().map(|t| t.switches.len() as u64),
        }
    }

    /// The invariant checker the `[invariants]` table describes.
    /// How long a run waits for handshakes and quiet before it starts
    /// (`[pingall]`'s settle times).
    pub fn settle(&self) -> crate::netrun::Settle {
        let p = &self.pingall;
        crate::netrun::Settle { quiet_ms: p.quiet_ms, min_wait_ms: p.min_wait_ms, max_ms: p.settle_ms }
    }

    pub fn checker(&self) -> sts_invariants::Checker {
        sts_invariants::Checker {
            enabled: self.invariants.check.iter().filter_map(|n| sts_invariants::Invariant::from_name(n)).collect(),
            isolation: self
                .invariants
                .isolation
                .iter()
                .map(|(a, b)| sts_invariants::check::IsolationRule { from: a.clone(), to: b.clone() })
                .collect(),
            ..sts_invariants::Checker::default()
        }
    }

    /// The topology the `[network]` table describes.
    pub fn topology(&self) -> Topology {
        let mut t = self.shape_with_default_hosts();
        if let Some(hosts) = &self.network.hosts {
            t.place_hosts(hosts);
        }
        t
    }

    fn shape_with_default_hosts(&self) -> Topology {
        let n = &self.network;
        match n.topology {
            TopologyKind::Linear => Topology::linear(n.size),
            TopologyKind::Star => Topology::star(n.size),
            TopologyKind::Mesh => Topology::mesh(n.size),
            TopologyKind::Tree => Topology::tree(n.depth, n.fanout),
            TopologyKind::FatTree => Topology::fat_tree(n.size),
            TopologyKind::Custom => Topology::custom(n.switches.unwrap_or(0), n.links.as_deref().unwrap_or(&[])),
            TopologyKind::File => n.file_topology.clone().unwrap_or_default(),
        }
    }
}

/// toml's error, with the offending line quoted.
/// The largest config or topology file sts reads (a fat-tree of 10,000
/// switches takes well under a megabyte).
pub const MAX_TEXT_FILE: u64 = 16 << 20;

/// Reads a config or topology file: a regular file (not a device, a FIFO or a
/// directory, which could block or never end) of at most [`MAX_TEXT_FILE`]
/// bytes, in UTF-8. Errors say which of these it is not.
pub fn read_text_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("cannot read: not a regular file".into());
    }
    if meta.len() > MAX_TEXT_FILE {
        return Err(format!(
            "cannot read: {} bytes, more than the {MAX_TEXT_FILE} a config or topology may have",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    utf8_text(bytes)
}

/// `bytes` as text, or `line N: not UTF-8 text (byte B)` naming the first
/// invalid byte.
pub fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        format!("line {line}: not UTF-8 text (byte {at})")
    })
}

/// `message` prefixed with the number of the first line of `text` that holds
/// `needle` (`line N: ...`, as TOML errors are), or as it is.
fn at_line_of(text: &str, needle: &str, message: String) -> String {
    match text.lines().position(|l| l.contains(needle) && !l.trim_start().starts_with('#')) {
        Some(i) => format!("line {}: {message}", i + 1),
        None => message,
    }
}

/// `message` prefixed with the line of the field it starts with
/// (`network.size: ...`, `fuzz.rates.link_failure = 2: ...`,
/// `invariants.check[1] = ...`): the field's own line, or, for a field left
/// out, its table's; as it is when it names no field of `text`.
fn at_field_line(text: &str, message: String) -> String {
    let path: String = message.chars().take_while(|c| c.is_ascii_alphanumeric() || "._[]".contains(*c)).collect();
    match field_line(text, &path) {
        Some(line) => format!("line {line}: {message}"),
        None => message,
    }
}

/// The line of `path` (`network.size`, `controllers[1].apps`) in `text`, or
/// of the deepest table on the way that is there.
fn field_line(text: &str, path: &str) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut item = doc.as_item();
    let mut span = None;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let (name, index) = match segment.split_once('[') {
            Some((name, rest)) => (name, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (segment, None),
        };
        let Some(next) = item.get(name) else { break };
        item = next;
        if let Some(i) = index {
            let Some(next) = item.get(i) else { break };
            item = next;
        }
        span = item.span().or_else(|| item.as_table_like().and_then(|_| item.as_table()?.span())).or(span);
    }
    let start = span?.start;
    Some(text[..start].matches('\n').count() + 1)
}

/// serde's "unknown field `x`, expected one of `a`, `b` ..." with the
/// closest valid key named first ("did you mean `b`?"), when one is close.
fn with_suggestion(message: &str) -> String {
    let Some((head, list)) = message.split_once(", expected one of ") else { return message.to_string() };
    let Some(unknown) = head.strip_prefix("unknown field `").and_then(|r| r.strip_suffix('`')) else {
        return message.to_string();
    };
    let keys: Vec<&str> = list.split(", ").map(|k| k.trim_matches('`')).collect();
    let best = keys
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|&(d, k)| d <= 2.max(k.len() / 4))
        .min();
    match best {
        Some((_, k)) => format!("{head}: did you mean `{k}`? (the keys here: {list})"),
        None => message.to_string(),
    }
}

fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    // A table or field the config must have, left out: say which.
    let message = match e.message().strip_prefix("missing field `").and_then(|r| r.strip_suffix('`')) {
        Some(field @ "network") => {
            format!("missing field `{field}`: the config needs a [{field}] table (see the top of orchestrator/engine/src/config.rs)")
        }
        _ => with_suggestion(e.message()),
    };
    let Some(span) = e.span() else { return message };
    let line = text[..span.start].matches('\n').count() + 1;
    match text.lines().nth(line - 1).map(str::trim).filter(|l| !l.is_empty()) {
        // The line is the user's and may be long; the list of keys is ours.
        Some(line_text) => {
            format!("line {line}: {message} (at `{}`)", sts_trace::bounded_message(line_text.into(), 120))
        }
        // A missing table or field has no line of its own.
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_str(s: &str) -> Result<Config, ConfigError> {
        Config::from_toml(s, Path::new("test.toml"))
    }

    #[test]
    fn a_misspelt_key_is_named_with_the_one_meant_and_every_key_whole() {
        let base = "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n";
        let e = load_str(&format!("{base}[fuzz.rates]\nlink_failur = 0.1\n")).unwrap_err().to_string();
        assert!(e.contains("unknown field `link_failur`: did you mean `link_failure`?"), "{e}");
        // The list of valid keys is not cut (it used to be, right where the key was).
        for key in ["switch_failure", "switch_recovery", "message_types"] {
            assert!(e.contains(&format!("`{key}`")), "{key}: {e}");
        }
        assert!(!e.contains("characters ..."), "{e}");
        // Nothing close: no guess.
        let e = load_str(&format!("{base}[fuzz]\nzzzzzzzz = 1\n")).unwrap_err().to_string();
        assert!(e.contains("unknown field `zzzzzzzz`, expected one of") && !e.contains("did you mean"), "{e}");
        // A long line of the user's is still bounded where it is quoted.
        let long = format!("{base}[fuzz]\nstesp = \"{}\"\n", "x".repeat(5000));
        let e = load_str(&long).unwrap_err().to_string();
        assert!(e.contains("did you mean `steps`?") && e.len() < 1500, "{} chars", e.len());
    }

    #[test]
    fn a_remote_controller_needs_an_address_and_nothing_sts_would_start() {
        let base = "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"remote\"\n";
        let ok = load_str(&format!("{base}address = \"127.0.0.1:6653\"\n")).unwrap();
        assert_eq!(ok.controllers[0].remote_address(), Some("127.0.0.1:6653".parse().unwrap()));
        assert!(!ok.virtual_time() && !ok.controllers[0].snapshot(), "its own time, no snapshots");
        let e = load_str(base).unwrap_err().to_string();
        assert!(e.contains("controllers[0].address") && e.contains("IP:PORT"), "{e}");
        let e = load_str(&format!("{base}address = \"localhost\"\n")).unwrap_err().to_string();
        assert!(e.contains("\"localhost\""), "{e}");
        let e = load_str(&format!("{base}address = \"127.0.0.1:6653\"\napps = [\"x\"]\n")).unwrap_err().to_string();
        assert!(e.contains("not started by sts"), "{e}");
        let e = load_str(&format!("{base}address = \"127.0.0.1:6653\"\n\n[time]\nvirtual = true\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("time.virtual"), "{e}");
        let e = load_str("[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"os-ken\"\napps = [\"a\"]\naddress = \"127.0.0.1:1\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("only a `remote` controller has an address"), "{e}");
    }

    #[test]
    fn virtual_time_is_on_for_known_controllers_unless_turned_off() {
        let base = "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n";
        assert!(load_str(base).unwrap().virtual_time());
        assert!(!load_str(&format!("{base}\n[time]\nvirtual = false\n")).unwrap().virtual_time());
        let command = format!("{base}\n[[controllers]]\nkind = \"command\"\ncommand = [\"x\", \"{{port}}\"]\n");
        assert!(!load_str(&command).unwrap().virtual_time(), "an unknown program: off");
        assert!(load_str(&format!("{command}\n[time]\nvirtual = true\n")).unwrap().virtual_time());
        let e = load_str(&format!("{base}\n[time]\nvirtuel = true\n")).unwrap_err().to_string();
        assert!(e.contains("virtuel"), "{e}");
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let e = load_str("[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"2.0\"\n").unwrap_err().to_string();
        assert!(e.contains("line 4") && e.contains("openflow"), "{e}");
        let e = load_str("[network]\ntopology = \"ring\"\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("ring"), "{e}");
        let e = load_str("[network]\ntopology = \"linear\"\nsizee = 3\n").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("sizee"), "{e}");
        let e = load_str("[network]\ntopology = \"linear\"\n").unwrap_err().to_string();
        assert!(e.contains("controllers"), "{e}");
    }

    /// More ports on a 1.0 switch than its FEATURES_REPLY can list is the
    /// config's fault (exit 2), not a handshake that silently fails; the
    /// limit is where the real encoding stops fitting.
    #[test]
    fn a_1_0_switch_with_more_ports_than_its_features_reply_holds_is_refused() {
        use sts_proxy::wire::{v10, Body, Message, OFP10};
        let features = |ports: usize| {
            let mut sw = sts_mocknet::switch::Switch::new(1, OFP10, ports as u32);
            let req = Message::new(1, Body::V10(v10::Msg::FeaturesRequest));
            let out = sw.handle(&req.emit().unwrap(), &req, 0);
            match out.as_slice() {
                [sts_mocknet::switch::Output::Reply(m)] => m.emit().is_ok(),
                other => panic!("{other:?}"),
            }
        };
        assert!(features(MAX_PORTS_10), "{MAX_PORTS_10} ports fit");
        assert!(!features(MAX_PORTS_10 + 1), "one more does not");
        let hosts = |n: usize| vec!["1"; n].join(", ");
        let config = |n: usize, of: &str| {
            format!("[network]\ntopology = \"custom\"\nswitches = 1\nopenflow = \"{of}\"\nhosts = [{}]\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n", hosts(n))
        };
        assert!(load_str(&config(MAX_PORTS_10, "1.0")).is_ok());
        let e = load_str(&config(MAX_PORTS_10 + 1, "1.0")).unwrap_err().to_string();
        assert!(e.contains(&format!("line 1: network: switch s1 would have {} ports", MAX_PORTS_10 + 1)), "{e}");
        assert!(load_str(&config(MAX_PORTS_10 + 1, "1.3")).is_ok(), "1.3 lists ports in multipart replies");
    }

    /// Errors found after parsing (values out of range, unknown names) name
    /// their line too, not only their field (they used to name the field alone).
    #[test]
    fn validation_errors_name_the_line_of_their_field() {
        let ctl = "[[controllers]]\nkind = \"ovs-testcontroller\"\n";
        let cases: &[(String, &str)] = &[
            (format!("[network]\ntopology = \"fat-tree\"\nsize = 3\n{ctl}"), "line 3: network.size"),
            (format!("[network]\ntopology = \"linear\"\n{ctl}\n[fuzz]\nstep_ms = 0\n"), "line 7: fuzz.step_ms"),
            (
                format!("[network]\ntopology = \"linear\"\n{ctl}[fuzz.rates]\nlink_failure = 2.0\n"),
                "line 6: fuzz.rates",
            ),
            (
                format!("[network]\ntopology = \"linear\"\n{ctl}[invariants]\ncheck = [\"loop\", \"x\"]\n"),
                "line 6: invariants.check[1]",
            ),
            (
                format!("[network]\ntopology = \"custom\"\nswitches = 2\nlinks = [[1, 2],\n  [2, 3]]\n{ctl}"),
                "line 5: network.links[1]",
            ),
            (format!("[network]\ntopology = \"linear\"\nsize = 2\nhosts = [1, 5]\n{ctl}"), "line 4: network.hosts[1]"),
            (
                format!("[network]\ntopology = \"linear\"\n{ctl}[invariants]\ncheck_every_ms = 0\n"),
                "line 6: invariants.check_every_ms",
            ),
        ];
        for (text, want) in cases {
            let e = load_str(text).unwrap_err().to_string();
            assert!(e.contains(want), "want {want:?} in: {e}\n--- config ---\n{text}");
        }
        let e = load_str(ctl).unwrap_err().to_string();
        assert!(e.contains("needs a [network] table"), "{e}");
    }

    #[test]
    fn file_topologies_load_next_to_the_config_and_errors_name_file_and_line() {
        let dir = std::env::temp_dir().join(format!("sts-config-topo-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("topos")).unwrap();
        std::fs::write(dir.join("topos/pair.topo"), "link s1 s2\nlink h1 s1\nlink h2 s2\n").unwrap();
        std::fs::write(dir.join("topos/bad.topo"), "link s1 s2\nlink h1 h2\n").unwrap();
        let config = |file: &str, extra: &str| {
            let text = format!("[network]\ntopology = \"file\"\nfile = \"{file}\"\n{extra}\n[[controllers]]\nkind = \"ovs-testcontroller\"\n");
            Config::from_toml(&text, &dir.join("c.toml"))
        };
        let c = config("topos/pair.topo", "").unwrap();
        let t = c.topology();
        assert_eq!((t.switches.clone(), t.links.clone(), t.hosts.len()), (vec![1, 2], vec![(1, 2)], 2));
        assert_eq!(c.local_files(), vec![(PathBuf::from("topos/pair.topo"), dir.join("topos/pair.topo"))]);
        // `hosts` replaces the file's placement, as for every shape.
        assert_eq!(config("topos/pair.topo", "hosts = [2, 2, 2]").unwrap().topology().hosts.len(), 3);
        let e = config("topos/bad.topo", "").unwrap_err().to_string();
        assert!(e.contains("bad.topo:2: link h1 h2"), "{e}");
        let e = config("topos/missing.topo", "").unwrap_err().to_string();
        assert!(e.contains("missing.topo: cannot read"), "{e}");
        let e = load_str("[network]\ntopology = \"file\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("network.file"), "{e}");
        let e = load_str(
            "[network]\ntopology = \"linear\"\nfile = \"x.topo\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("only applies"), "{e}");
        // An experiment directory gets its own copy.
        let exp = dir.join("exp");
        sts_trace::dir::copy_config_files(c.local_files(), &exp).unwrap();
        assert_eq!(
            std::fs::read_to_string(exp.join("topos/pair.topo")).unwrap(),
            "link s1 s2\nlink h1 s1\nlink h2 s2\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relays_are_checked_and_placeholders_must_name_one() {
        let base = "[network]\ntopology = \"linear\"\nsize = 2\n\n[[controllers]]\nkind = \"command\"\ncommand = [\"ctl\", \"--peer\", \"{relay:a-b}\"]\n";
        let c = load_str(&format!("{base}\n[[relays]]\nname = \"a-b\"\nto = \"127.0.0.1:9001\"\n")).unwrap();
        assert_eq!(c.relays[0].placeholder(), "{relay:a-b}");
        let e = load_str(base).unwrap_err().to_string();
        assert!(e.contains("{relay:a-b} names no [[relays]] entry"), "{e}");
        let e = load_str(&format!("{base}\n[[relays]]\nname = \"a-b\"\nto = \"localhost\"\n")).unwrap_err().to_string();
        assert!(e.contains("relays[0].to"), "{e}");
        let e =
            load_str(&format!("{base}\n[[relays]]\nname = \"a b\"\nto = \"127.0.0.1:1\"\n")).unwrap_err().to_string();
        assert!(e.contains("relays[0].name"), "{e}");
        let two = "[[relays]]\nname = \"a-b\"\nto = \"127.0.0.1:1\"\n";
        let e = load_str(&format!("{base}\n{two}{two}")).unwrap_err().to_string();
        assert!(e.contains("relays[1].name") && e.contains("two relays"), "{e}");
    }

    #[test]
    fn custom_topologies_and_host_placement() {
        let c = load_str("[network]\ntopology = \"custom\"\nswitches = 3\nlinks = [[1, 2], [2, 3]]\nhosts = [1, 1, 3]\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n").unwrap();
        let t = c.topology();
        assert_eq!((t.switches.len(), t.links.len()), (3, 2));
        assert_eq!(t.hosts.iter().map(|h| h.switch).collect::<Vec<_>>(), vec![1, 1, 3]);
        let e = load_str("[network]\ntopology = \"custom\"\nswitches = 2\nlinks = [[1, 5]]\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n").unwrap_err().to_string();
        assert!(e.contains("network.links[0]"), "{e}");
        let e = load_str("[network]\ntopology = \"linear\"\nsize = 2\nhosts = [3]\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n").unwrap_err().to_string();
        assert!(e.contains("network.hosts[0] = 3"), "{e}");
        let e = load_str(
            "[network]\ntopology = \"custom\"\nlinks = []\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("network.switches"), "{e}");
        // Absurd sizes are refused before anything is built.
        for net in [
            "topology = \"linear\"\nsize = 1000000000000",
            "topology = \"tree\"\ndepth = 64\nfanout = 64",
            "topology = \"fat-tree\"\nsize = 4000000000",
        ] {
            let e = load_str(&format!("[network]\n{net}\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("more than 100000 switches") && e.contains("network."), "{e}");
        }
        // ... and links, which grow faster than switches in a mesh or a fat tree.
        for (net, field) in [
            ("topology = \"mesh\"\nsize = 20000", "network.size"),
            ("topology = \"mesh\"\nsize = 1415", "network.size"),
            ("topology = \"fat-tree\"\nsize = 126", "network.size"),
            ("topology = \"tree\"\ndepth = 100000\nfanout = 1", "network.depth"),
        ] {
            let started = std::time::Instant::now();
            let e = load_str(&format!("[network]\n{net}\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field) && (e.contains("links") || e.contains("at most")), "{e}");
            assert!(started.elapsed() < std::time::Duration::from_secs(1), "refused by arithmetic, not by building");
        }
        let ok = load_str("[network]\ntopology = \"mesh\"\nsize = 1414\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n");
        assert!(ok.is_ok(), "{:?}", ok.err());
    }

    #[test]
    fn only_small_regular_utf8_files_are_read() {
        assert!(read_text_file(Path::new("/dev/zero")).unwrap_err().contains("not a regular file"));
        assert!(read_text_file(&std::env::temp_dir()).unwrap_err().contains("not a regular file"));
        let p = std::env::temp_dir().join(format!("sts-config-latin1-{}.toml", std::process::id()));
        std::fs::write(&p, b"[network]\ntopology = \"linear\"\n# caf\xe9\n").unwrap();
        assert_eq!(read_text_file(&p).unwrap_err(), "line 3: not UTF-8 text (byte 35)");
        let e = Config::load(&p).unwrap_err().to_string();
        assert!(e.contains("sts-config-latin1") && e.contains("line 3"), "{e}");
    }

    #[test]
    fn examples_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "toml") {
                Config::load(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 5, "expected an example per controller, found {n}");
    }

    #[test]
    fn c65faucet_is_configured_as_faucet_is_and_only_on_openflow_13() {
        let e = Config::from_toml(
            "[network]\ntopology = \"linear\"\nopenflow = \"1.0\"\n[[controllers]]\nkind = \"c65faucet\"\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("c65faucet speaks only OpenFlow 1.3"), "{e}");
        let config = Config::from_toml(
            "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n[[controllers]]\nkind = \"c65faucet\"\n",
            Path::new("."),
        )
        .unwrap();
        assert!(config.virtual_time() && config.controllers[0].snapshot());
        let dir = std::env::temp_dir().join(format!("sts-c65faucet-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = crate::presets::specs(&config, &dir).unwrap().remove(0);
        // The same file name as faucet's: policies edit `{dir}/faucet-0.yaml`.
        let yaml = std::fs::read_to_string(dir.join("faucet-0.yaml")).unwrap();
        assert!(yaml.contains("dp_id: 2"), "{yaml}");
        assert_eq!(spec.name, "c65faucet");
        assert!(spec.command[0].ends_with("c65faucet/bin/faucet"), "{:?}", spec.command);
        assert!(spec.command.windows(2).any(|w| w == ["--ryu-config-file", "/dev/null"]), "{:?}", spec.command);
        assert!(spec.env.iter().any(|(k, v)| k == "FAUCET_CONFIG" && v == "{config}"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cerberus_gets_a_topology_json_of_the_network_and_only_openflow_13() {
        let e = Config::from_toml(
            "[network]\ntopology = \"linear\"\nopenflow = \"1.0\"\n[[controllers]]\nkind = \"cerberus\"\n",
            Path::new("."),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cerberus speaks only OpenFlow 1.3"), "{e}");

        let config = Config::from_toml(
            "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.3\"\n[[controllers]]\nkind = \"cerberus\"\n",
            Path::new("."),
        )
        .unwrap();
        let net = sts_mocknet::Network::new(&config.topology(), config.network.openflow.wire());
        let doc: serde_json::Value = serde_json::from_str(&crate::presets::cerberus_topology(&net)).unwrap();
        let sw = &doc["switch_matrix"];
        assert_eq!(sw["dp_ids"], serde_json::json!({"s1": 1, "s2": 2, "s3": 3}));
        // Each link once, with the ports the mock network gives it (hosts take port 1).
        assert_eq!(sw["links"], serde_json::json!([["s1", "2", "s2", "2"], ["s2", "3", "s3", "2"]]));
        let hosts = doc["hosts_matrix"].as_array().unwrap();
        assert_eq!(hosts.len(), 3);
        assert_eq!(
            hosts[0],
            serde_json::json!({"name": "h1", "interfaces": [{"switch": "s1", "swport": 1, "mac": "00:00:00:00:00:01",
                "ipv4": "10.0.0.1/8", "vlan": 100, "tagged": false}]})
        );

        let dir = std::env::temp_dir().join(format!("sts-config-cerberus-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = &crate::presets::specs(&config, &dir).unwrap()[0];
        assert!(dir.join("cerberus-0/topology.json").is_file() && dir.join("cerberus-0/rollback").is_dir());
        assert!(spec.command.iter().any(|a| a == "cerberus.cerberus"), "{:?}", spec.command);
        assert!(spec.env.iter().any(|(k, v)| k == "CERBERUS_CONFIG" && v == "{config}"), "{:?}", spec.env);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
