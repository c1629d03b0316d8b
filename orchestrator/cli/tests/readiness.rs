//! Waiting for a controller to listen asks the kernel (a netlink
//! `sock_diag` query of listening sockets) or the snapshot shim, and never
//! reads `/proc/net/tcp{,6}`, whose size grows with every connection and
//! TIME-WAIT socket of the machine. Checked from outside with strace
//! (`scripts/setup` installs it), following every process and thread sts
//! starts.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// `sts pingall --config CONFIG` under strace: the calls it made (opens and
/// sockets), one a line.
fn traced_pingall(config: &Path, tag: &str) -> String {
    let log = std::env::temp_dir().join(format!("sts-readiness-{tag}-{}.strace", std::process::id()));
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=open,openat,openat2,socket", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_sts"))
        .args(["pingall", "--config"])
        .arg(config)
        .output()
        .expect("strace (scripts/setup installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let calls = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    calls
}

#[test]
fn waiting_for_a_controller_reads_no_proc_net_tcp() {
    // Forked from a zygote: the shim says when the controller listens.
    let calls = traced_pingall(&root().join("examples/osken-linear.toml"), "zygote");
    assert!(calls.contains("libsts_shim.so"), "the controller ran under the shim");
    assert!(
        !calls.contains("/proc/net/tcp"),
        "{}",
        calls.lines().filter(|l| l.contains("/proc/net")).collect::<Vec<_>>().join("\n")
    );

    // Started as a new process: sts polls the kernel until it listens.
    let config = std::env::temp_dir().join(format!("sts-readiness-{}.toml", std::process::id()));
    let text = std::fs::read_to_string(root().join("examples/osken-linear.toml")).unwrap() + "snapshot = false\n";
    std::fs::write(&config, text).unwrap();
    let calls = traced_pingall(&config, "process");
    let _ = std::fs::remove_file(&config);
    assert!(
        calls.lines().any(|l| l.contains("socket(AF_NETLINK") && l.contains("NETLINK_SOCK_DIAG")),
        "the wait asked the kernel's sock_diag"
    );
    assert!(
        !calls.contains("/proc/net/tcp"),
        "{}",
        calls.lines().filter(|l| l.contains("/proc/net")).collect::<Vec<_>>().join("\n")
    );
}
