//! Ready-made [`ControllerSpec`]s for the real controllers `scripts/setup`
//! installs: os-ken and Ryu apps, faucet and ovs-testcontroller.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::controller::ControllerSpec;

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
    spec(name, cmd, vec![PYTHON_FAULTS], None, 30)
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
    let dir = config.parent().unwrap_or(Path::new(".")).display().to_string();
    let bin = local_dir().join("faucet/bin/faucet");
    let log = format!("{dir}/faucet.log");
    let exc = format!("{dir}/faucet_exception.log");
    let mut s = spec(
        "faucet",
        vec![
            bin.display().to_string(),
            "--ryu-ofp-tcp-listen-port".into(),
            "{port}".into(),
            "--ryu-ofp-listen-host".into(),
            "{address}".into(),
        ],
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
    // faucet execs `osken-manager` by name: its venv's bin must come first on PATH.
    let path = std::env::var("PATH").unwrap_or_default();
    s.env.push(("PATH".into(), format!("{}:{path}", local_dir().join("faucet/bin").display())));
    s.env.push(("FAUCET_LOG".into(), log));
    s.env.push(("FAUCET_EXCEPTION_LOG".into(), exc));
    s
}
