//! `sts import` reads both recording formats of `sts proxy --record`:
//! version 2 (each message's bytes, no fingerprint: made from the bytes when
//! needed) and version 1 (which also carried the fingerprint); anything else
//! is refused with the file and line named (exit 2). The end-to-end import of
//! a real Open vSwitch session is `ovs_import.rs`.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A FEATURES_REPLY of datapath 1, OpenFlow 1.3, as it crossed the proxy.
const FEATURES_REPLY: &str = "040600202aa97d84000000000000000100000000100000000000004f00000000";

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sts-import-formats-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[network]\ntopology = \"linear\"\nsize = 2\nopenflow = \"1.3\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n",
    )
    .unwrap();
    dir
}

fn import(dir: &std::path::Path, header: &str, extra: &str, out: &str) -> Output {
    let line = format!(
        r#"{{"seq":1,"time_ms":5,"channel":{{"dpid":0,"controller":0}},"dir":"switch_to_controller","msg_type":"features_reply","xid":1,"raw":"{FEATURES_REPLY}","disposition":"passed"{extra}}}"#
    );
    let recording = dir.join(format!("{out}.jsonl"));
    std::fs::write(&recording, format!("{header}\n{line}\n")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["import", recording.to_str().unwrap(), "--config"])
        .arg(dir.join("config.toml"))
        .arg("--out")
        .arg(dir.join(out))
        .output()
        .expect("run sts import")
}

#[test]
fn both_recording_versions_import_and_others_are_refused() {
    let dir = scratch();
    let said = |o: &Output| format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));

    let v2 = import(&dir, sts_proxy::standalone::RECORDING_HEADER, "", "v2");
    assert_eq!(v2.status.code(), Some(0), "{}", said(&v2));
    assert!(said(&v2).contains("connection 0 = s1"), "{}", said(&v2));
    assert!(dir.join("v2/trace.jsonl").is_file());

    let v1 =
        import(&dir, sts_proxy::standalone::RECORDING_HEADER_V1, r#","fingerprint":"of4/features_reply {}""#, "v1");
    assert_eq!(v1.status.code(), Some(0), "{}", said(&v1));
    assert!(said(&v1).contains("connection 0 = s1"), "{}", said(&v1));

    let v3 = import(&dir, r#"{"format":"sts-openflow-recording","version":3}"#, "", "v3");
    assert_eq!(v3.status.code(), Some(2), "{}", said(&v3));
    assert!(said(&v3).contains("v3.jsonl:1: not an sts proxy recording"), "{}", said(&v3));
}
