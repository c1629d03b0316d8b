//! Ready-made [`ControllerSpec`]s for the real controllers `scripts/setup`
//! installs: os-ken and Ryu apps, faucet, c65faucet and ovs-testcontroller;
//! and [`specs`], a config's controllers as specs with the files they need
//! written (faucet.yaml, Cerberus's topology.json).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Config, ControllerKind};
use crate::controller::ControllerSpec;
use sts_mocknet::Topology;

/// Where `scripts/setup` put the controllers: `$STS_LOCAL`, or `.local` at the
/// root of the workspace sts was built from.
pub fn local_dir() -> PathBuf {
    std::env::var_os("STS_LOCAL")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local"))
}

fn spec(
    name: &str,
    command: Vec<String>,
    env: Vec<(&str, &str)>,
    config: Option<PathBuf>,
    timeout_s: u64,
) -> ControllerSpec {
    ControllerSpec {
        name: name.into(),
        command,
        env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        config,
        start_timeout: Duration::from_secs(timeout_s),
        guard_group: false,
    }
}

/// A Python controller that dies of a fatal signal (SIGSEGV, SIGABRT ...)
/// writes its Python stack into its log instead of vanishing without a word.
const PYTHON_FAULTS: (&str, &str) = ("PYTHONFAULTHANDLER", "1");

/// What makes an eventlet controller (the Ryu lineage, faucet) start faster
/// without changing what it does in sts's runs, about 0.3 s of os-ken's 0.8 s
/// of imports (`docs/snapshots.md`): eventlet's green DNS resolver (which
/// imports dnspython) is not installed, since the controllers sts starts
/// resolve no names (they listen on an address and are given addresses);
/// and `import distutils` finds Python's own instead of setuptools' copy,
/// where the venv's Python still has one (3.11 and before), for the one
/// `LooseVersion` Ryu and os-ken compare with.
fn eventlet_quick_start(venv: &Path) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![("EVENTLET_NO_GREENDNS", "yes")];
    let stdlib_distutils = std::fs::read_dir(venv.join("lib")).is_ok_and(|dir| {
        dir.flatten().any(|e| {
            let name = e.file_name();
            let minor = name.to_str().and_then(|n| n.strip_prefix("python3.")).and_then(|m| m.parse::<u32>().ok());
            minor.is_some_and(|m| m <= 11)
        })
    });
    if stdlib_distutils {
        env.push(("SETUPTOOLS_USE_DISTUTILS", "stdlib"));
    }
    env
}

/// os-ken running `apps` (module names such as `os_ken.app.simple_switch_13`).
pub fn os_ken(apps: &[&str]) -> ControllerSpec {
    os_ken_with(&[], apps)
}

/// os-ken with extra options (such as `--observe-links`, or `--wsapi-port
/// {aux_port}` for the REST API) before its apps.
pub fn os_ken_with(options: &[&str], apps: &[&str]) -> ControllerSpec {
    manager("os-ken", local_dir().join("osken/bin/osken-manager"), options, apps)
}

/// Ryu 4.34 (os-ken's parent; `.local/ryu`) running `apps` (`ryu.app.simple_switch_13` ...),
/// with extra options before them.
pub fn ryu_with(options: &[&str], apps: &[&str]) -> ControllerSpec {
    manager("ryu", local_dir().join("ryu/bin/ryu-manager"), options, apps)
}

/// A Ryu-lineage `manager` (os-ken's, Ryu's: the same command line) with
/// `options`, then `apps`.
fn manager(name: &str, manager: PathBuf, options: &[&str], apps: &[&str]) -> ControllerSpec {
    let mut cmd = vec![
        manager.display().to_string(),
        "--ofp-listen-host".into(),
        "{address}".into(),
        "--ofp-tcp-listen-port".into(),
        "{port}".into(),
    ];
    cmd.extend(options.iter().map(|a| a.to_string()));
    cmd.extend(apps.iter().map(|a| a.to_string()));
    let venv = manager.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
    let mut env = vec![PYTHON_FAULTS];
    env.extend(eventlet_quick_start(venv));
    spec(name, cmd, env, None, 30)
}

/// Cerberus 0.1.8 (a Ryu app, installed into `.local/ryu` by `scripts/setup`)
/// with the topology.json at `config`; its log, rollback and failed-config
/// directories sit beside it (setup points Cerberus's fixed `/etc/cerberus`
/// and `/var/log/cerberus` paths at `CERBERUS_*` variables). Its REST API
/// (`PUT /api/push_config` ...) listens on 127.0.0.1:{aux_port}.
pub fn cerberus(config: &Path, options: &[&str]) -> ControllerSpec {
    let dir = config.parent().unwrap_or(Path::new(".")).display().to_string();
    let mut wsapi = vec!["--wsapi-host", "127.0.0.1", "--wsapi-port", "{aux_port}"];
    wsapi.extend_from_slice(options);
    let mut s = manager("cerberus", local_dir().join("ryu/bin/ryu-manager"), &wsapi, &["cerberus.cerberus"]);
    s.config = Some(config.to_owned());
    s.env.push(("CERBERUS_CONFIG".into(), "{config}".into()));
    s.env.push(("CERBERUS_LOG_PATH".into(), dir.clone()));
    s.env.push(("CERBERUS_LOG_FILE".into(), format!("{dir}/cerberus.log")));
    s.env.push(("CERBERUS_ROLLBACK_DIR".into(), format!("{dir}/rollback")));
    s.env.push(("CERBERUS_FAILED_CONF_DIR".into(), format!("{dir}/failed")));
    s
}

/// Open vSwitch's test controller (a learning switch), with extra arguments
/// such as `-O OpenFlow13`. One process serves at most 16 switches (its
/// `MAX_SWITCHES`); larger networks need several.
pub fn ovs_testcontroller(extra: &[&str]) -> ControllerSpec {
    // Its control socket defaults to /var/run/openvswitch, which may not
    // exist; in the experiment it would outlive a killed run and stop `cp -r`.
    let mut cmd = vec!["ovs-testcontroller".to_string(), "--unixctl={socket_dir}/ovs-testcontroller-{port}.ctl".into()];
    cmd.extend(extra.iter().map(|a| a.to_string()));
    cmd.push("ptcp:{port}:{address}".into());
    spec("ovs-testcontroller", cmd, vec![], None, 10)
}

/// faucet with the given `faucet.yaml`; logs go beside the config file.
pub fn faucet(config: &Path) -> ControllerSpec {
    let mut s = faucet_on("faucet", &local_dir().join("faucet"), config, &[]);
    // faucet runs on os-ken, and so on eventlet.
    let quick = eventlet_quick_start(&local_dir().join("faucet"));
    s.env.extend(quick.into_iter().map(|(k, v)| (k.to_string(), v.to_string())));
    // faucet execs `osken-manager` by name: its venv's bin must come first on PATH.
    let path = std::env::var("PATH").unwrap_or_default();
    s.env.push(("PATH".into(), format!("{}:{path}", local_dir().join("faucet/bin").display())));
    s
}

/// c65faucet (`.local/c65faucet`): faucet's application on c65of, an
/// OpenFlow 1.3 stack of its own (not of the Ryu lineage) that runs on OS
/// threads, with the given `faucet.yaml`; logs go beside the config file.
pub fn c65faucet(config: &Path) -> ControllerSpec {
    // Its Ryu-style options file would be read from /etc otherwise.
    faucet_on("c65faucet", &local_dir().join("c65faucet"), config, &["--ryu-config-file", "/dev/null"])
}

/// A faucet (of the venv at `venv`) named `name`, with `extra` options.
fn faucet_on(name: &str, venv: &Path, config: &Path, extra: &[&str]) -> ControllerSpec {
    let dir = config.parent().unwrap_or(Path::new(".")).display().to_string();
    let bin = venv.join("bin/faucet");
    let log = format!("{dir}/{name}.log");
    let exc = format!("{dir}/{name}_exception.log");
    let mut command = vec![
        bin.display().to_string(),
        "--ryu-ofp-tcp-listen-port".into(),
        "{port}".into(),
        "--ryu-ofp-listen-host".into(),
        "{address}".into(),
    ];
    command.extend(extra.iter().map(|a| a.to_string()));
    let mut s = spec(
        name,
        command,
        vec![
            ("FAUCET_CONFIG", "{config}"),
            ("FAUCET_PROMETHEUS_ADDR", "127.0.0.1"),
            ("FAUCET_PROMETHEUS_PORT", "{aux_port}"),
            ("PYTHONHASHSEED", "0"),
            PYTHON_FAULTS,
        ],
        Some(config.to_owned()),
        60,
    );
    s.env.push(("FAUCET_LOG".into(), log));
    s.env.push(("FAUCET_EXCEPTION_LOG".into(), exc));
    s
}

/// The specs of `config`'s controllers, with the files they need written
/// into `run_dir` (faucet.yaml, Cerberus's topology.json).
pub fn specs(config: &Config, run_dir: &Path) -> std::io::Result<Vec<ControllerSpec>> {
    let topo = config.topology();
    config
        .controllers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut spec = match c.kind {
                ControllerKind::OsKen | ControllerKind::Ryu => {
                    // An app given as a .py file is found next to the config.
                    let apps: Vec<String> = c
                        .apps
                        .iter()
                        .map(|a| {
                            if a.ends_with(".py") && Path::new(a).is_relative() {
                                config.base_dir.join(a).display().to_string()
                            } else {
                                a.clone()
                            }
                        })
                        .collect();
                    let (args, apps) = (
                        c.args.iter().map(String::as_str).collect::<Vec<_>>(),
                        apps.iter().map(String::as_str).collect::<Vec<_>>(),
                    );
                    if c.kind == ControllerKind::Ryu {
                        ryu_with(&args, &apps)
                    } else {
                        os_ken_with(&args, &apps)
                    }
                }
                ControllerKind::OvsTestcontroller => {
                    ovs_testcontroller(&c.args.iter().map(String::as_str).collect::<Vec<_>>())
                }
                ControllerKind::Faucet | ControllerKind::C65faucet => {
                    // The same file name for both: policies edit `{dir}/faucet-N.yaml`.
                    let path = run_dir.join(format!("faucet-{i}.yaml"));
                    std::fs::write(&path, faucet_yaml(&topo))?;
                    if c.kind == ControllerKind::Faucet {
                        faucet(&path)
                    } else {
                        c65faucet(&path)
                    }
                }
                ControllerKind::Cerberus => {
                    let dir = run_dir.join(format!("cerberus-{i}"));
                    for sub in ["rollback", "failed"] {
                        std::fs::create_dir_all(dir.join(sub))?;
                    }
                    let path = dir.join("topology.json");
                    let net = sts_mocknet::Network::new(&topo, config.network.openflow.wire());
                    std::fs::write(&path, cerberus_topology(&net))?;
                    cerberus(&path, &c.args.iter().map(String::as_str).collect::<Vec<_>>())
                }
                // Nothing to start: the session attaches to its address.
                ControllerKind::Remote => ControllerSpec {
                    name: "remote".to_string(),
                    command: Vec::new(),
                    env: Vec::new(),
                    config: None,
                    start_timeout: Duration::from_secs(0),
                    guard_group: false,
                },
                ControllerKind::Command => ControllerSpec {
                    name: c.command[0].rsplit('/').next().unwrap_or("controller").to_string(),
                    command: c.command.clone(),
                    env: c.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    config: None,
                    start_timeout: Duration::from_secs(30),
                    // A command may be a wrapper that does not exec.
                    guard_group: true,
                },
            };
            if let Some(ms) = c.start_timeout_ms {
                spec.start_timeout = Duration::from_millis(ms);
            }
            Ok(spec)
        })
        .collect()
}

/// A faucet.yaml naming every datapath of `topo`, every port an access port on
/// one VLAN (faucet refuses datapaths its config does not list).
pub fn faucet_yaml(topo: &Topology) -> String {
    let mut y = String::from("# Generated by sts for this topology.\nvlans:\n  sts:\n    vid: 100\ndps:\n");
    let degrees = topo.degrees();
    for &s in &topo.switches {
        y.push_str(&format!("  sw{s}:\n    dp_id: {s}\n    hardware: \"Open vSwitch\"\n    interfaces:\n"));
        // Ports beyond the wired ones are declared too, one per host: a host
        // migrating here is plugged into a new port, and faucet only switches
        // ports its config names (as on a real switch, whose every port is
        // configured).
        for p in 1..=degrees[&s].max(1) + topo.hosts.len() as u32 {
            y.push_str(&format!("      {p}: {{native_vlan: sts}}\n"));
        }
    }
    y
}

/// Cerberus's topology.json for `net`: every switch (`sN`, its datapath id),
/// every switch-to-switch link with its two ports, and every host with the
/// MAC, IPv4 address (/8) and port sts gives it, all on VLAN 100, untagged.
/// Cerberus installs its flows from this alone: a host it does not list, or
/// one that moved, is dropped.
pub fn cerberus_topology(net: &sts_mocknet::Network) -> String {
    let dp_ids: serde_json::Map<String, serde_json::Value> =
        net.switches.keys().map(|d| (format!("s{d}"), serde_json::json!(d))).collect();
    let links: Vec<serde_json::Value> = net
        .switch_links()
        .into_iter()
        .map(|((d1, p1), (d2, p2))| {
            serde_json::json!([format!("s{d1}"), p1.to_string(), format!("s{d2}"), p2.to_string()])
        })
        .collect();
    let hosts: Vec<serde_json::Value> = net
        .hosts
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let (d, p) = net.host_port(i)?;
            Some(serde_json::json!({
                "name": h.name,
                "interfaces": [{
                    "switch": format!("s{d}"),
                    "swport": p,
                    "mac": h.mac.to_string(),
                    "ipv4": format!("{}/8", h.ip),
                    "vlan": 100,
                    "tagged": false,
                }],
            }))
        })
        .collect();
    let doc = serde_json::json!({
        "switch_matrix": { "dp_ids": dp_ids, "links": links, "p4": [] },
        "hosts_matrix": hosts,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventlet_controllers_start_without_green_dns_and_with_pythons_own_distutils_where_it_has_one() {
        let env = |s: &ControllerSpec, k: &str| s.env.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone());
        let osken = os_ken(&["os_ken.app.simple_switch_13"]);
        assert_eq!(env(&osken, "EVENTLET_NO_GREENDNS").as_deref(), Some("yes"));
        // The venv's own Python says whether it still has distutils.
        let python = local_dir().join("osken/bin/python");
        let minor = std::process::Command::new(&python)
            .args(["-c", "import sys; print(sys.version_info[1])"])
            .output()
            .unwrap_or_else(|e| panic!("{}: {e} (scripts/setup installs it)", python.display()));
        let minor: u32 = String::from_utf8_lossy(&minor.stdout).trim().parse().unwrap();
        let stdlib = env(&osken, "SETUPTOOLS_USE_DISTUTILS");
        assert_eq!(stdlib.as_deref(), (minor <= 11).then_some("stdlib"), "python 3.{minor}");
        let faucet = faucet(Path::new("/tmp/faucet.yaml"));
        assert_eq!(env(&faucet, "EVENTLET_NO_GREENDNS").as_deref(), Some("yes"));
        assert_eq!(env(&ovs_testcontroller(&[]), "EVENTLET_NO_GREENDNS"), None, "not a Python controller");
        assert_eq!(env(&c65faucet(Path::new("/tmp/faucet.yaml")), "EVENTLET_NO_GREENDNS"), None, "no eventlet");
    }
}
