//! Traces written by an older sts still load, and read as this sts would
//! have written them: every fingerprint equals the one this codec computes
//! for the same bytes, so replays of old traces still match new runs.
//!
//! `fixtures/v2-trace.jsonl` is made of records taken from real version-2
//! traces (os-ken, Ryu, faucet, Cerberus; OpenFlow 1.0 and 1.3), one per
//! distinct message shape, and a recorded violation with its witness.

use std::path::Path;

use sts_proxy::wire::{Fingerprint, Message};
use sts_trace::{Internal, Trace, VERSION};

fn fixture() -> Trace {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v2-trace.jsonl");
    Trace::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_version_2_trace_loads_with_its_violation() {
    let t = fixture();
    assert_eq!(t.header.version, VERSION, "read into this version's format");
    assert_eq!(t.externals().len(), 2);
    let v = t.violation().expect("the recorded violation");
    assert_eq!(v.invariant, "isolation");
    assert!(v.witness.as_ref().is_some_and(|w| !w.path.is_empty()), "{v:?}");
}

#[test]
fn old_fingerprints_read_as_this_codec_computes_them() {
    let t = fixture();
    let mut checked = 0;
    for r in &t.records {
        let Some(Internal::Openflow { fp, raw: Some(raw), .. }) = r.internal() else { continue };
        let now = Fingerprint::of(&Message::parse(raw.clone()).unwrap_or_else(|e| panic!("line {}: {e}", r.line)));
        assert_eq!(fp, &now, "line {}", r.line);
        assert!(!fp.0.contains("\"V1") && !fp.0.contains("{\"Hello\""), "line {}: {fp}", r.line);
        checked += 1;
    }
    assert!(checked >= 40, "{checked} messages checked");
}

#[test]
fn fingerprints_name_variants_as_the_spec_does() {
    // One FLOW_MOD spelled out, so that renaming a codec type or variant
    // fails here rather than silently stopping replays from matching.
    let t = fixture();
    let fps: Vec<&str> = t
        .records
        .iter()
        .filter_map(|r| match r.internal() {
            Some(Internal::Openflow { fp, .. }) => Some(fp.0.as_str()),
            _ => None,
        })
        .collect();
    let flow_mod = fps
        .iter()
        .find(|f| f.starts_with("of4/flow_mod ") && f.contains("pop_vlan") && f.contains("set_field"))
        .expect("a FLOW_MOD that pops a VLAN and sets a field");
    assert!(flow_mod.contains(r#""instructions":[{"apply_actions":["#), "{flow_mod}");
    assert!(flow_mod.contains(r#"{"basic":{"field":"#), "{flow_mod}");
    assert!(fps.contains(&"of4/features_request {}"), "a message without fields is {{}}");
    assert!(fps.contains(&"of4/barrier_request {}"));
    assert!(fps.iter().any(|f| f.starts_with(r#"of4/multipart_request {"flags":0,"body":"port_desc"}"#)));
    assert!(fps.iter().any(|f| f.starts_with(r#"of4/hello {"version":4,"hello":{"elements":["#)));
}
