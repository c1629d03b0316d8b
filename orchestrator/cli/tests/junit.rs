//! `--junit FILE` on fuzz, replay and minimize: the files validate against
//! the Jenkins JUnit schema (`junit-10.xsd`, by xmllint), and an independent
//! parser (Python's ElementTree) checks what the schema cannot:
//! `testsuites` of `testsuite`s whose `tests`,
//! `failures` and `errors` attributes count their `testcase`s, each case
//! named, each `failure` with a message and a type; the bug is a failing
//! case carrying the violation and, for minimize, the MCS.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn sts(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// (tests, failures, errors, every failure's text), after checking the
/// structure; panics with the checker's complaint otherwise.
fn check(path: &Path) -> (usize, usize, usize, String) {
    common::validate_junit_schema(path);
    let script = r#"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
total = [0, 0, 0]
texts = []
for suite in root:
    assert suite.tag == "testsuite" and suite.get("name"), suite.attrib
    cases = suite.findall("testcase")
    fails = [c for c in cases if c.find("failure") is not None]
    errs = [c for c in cases if c.find("error") is not None]
    assert int(suite.get("tests")) == len(cases), suite.attrib
    assert int(suite.get("failures")) == len(fails), suite.attrib
    assert int(suite.get("errors")) == len(errs), suite.attrib
    for c in cases:
        assert c.get("name") and c.get("classname"), c.attrib
        for f in c.findall("failure") + c.findall("error"):
            assert f.get("message") and f.get("type") is not None, f.attrib
            texts.append(f.text or "")
    total[0] += len(cases); total[1] += len(fails); total[2] += len(errs)
assert int(root.get("tests")) == total[0] and int(root.get("failures")) == total[1], root.attrib
print(total[0], total[1], total[2])
print("\n".join(texts))
"#;
    let out = Command::new("python3").args(["-c", script]).arg(path).output().unwrap();
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (counts, rest) = text.split_once('\n').unwrap();
    let n: Vec<usize> = counts.split(' ').map(|x| x.parse().unwrap()).collect();
    (n[0], n[1], n[2], rest.to_string())
}

#[test]
fn fuzz_replay_and_minimize_write_junit_a_ci_system_reads() {
    let dir = std::env::temp_dir().join(format!("sts-junit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exp: PathBuf = dir.join("exp");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let j = |name: &str| dir.join(name);

    let (code, err) = sts(&[
        "fuzz",
        "--config",
        config.to_str().unwrap(),
        "--out",
        exp.to_str().unwrap(),
        "--junit",
        j("fuzz.xml").to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let (tests, failures, _, text) = check(&j("fuzz.xml"));
    assert_eq!((tests, failures), (1, 1));
    assert!(text.contains("victim: loop") && text.contains("trace.jsonl"), "{text}");

    let (code, err) =
        sts(&["replay", exp.to_str().unwrap(), "--repeat", "2", "--junit", j("replay.xml").to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    let (tests, failures, _, _) = check(&j("replay.xml"));
    assert_eq!(tests, 2);
    assert_eq!(failures, 2, "the loop reproduces in both replays: each is a failing case");

    let expect = j("expect.xml");
    let args = ["replay", exp.to_str().unwrap(), "--expect", "reproduce", "--junit", expect.to_str().unwrap()];
    let (code, err) = sts(&args);
    assert_eq!(code, 0, "{err}");
    let (tests, failures, _, _) = check(&j("expect.xml"));
    assert_eq!((tests, failures), (1, 0), "expected to reproduce, and it did: a passing case");

    let (code, err) = sts(&[
        "minimize",
        exp.to_str().unwrap(),
        "--final-replays",
        "1",
        "--junit",
        j("minimize.xml").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (tests, failures, _, text) = check(&j("minimize.xml"));
    assert_eq!((tests, failures), (1, 1));
    assert!(text.contains("minimal causal sequence: 1 of"), "{text}");
}

/// (suite name, classname, case name) of every case, and the first suite's
/// attributes and properties, by an independent parser.
fn names_and_facts(path: &Path) -> (Vec<String>, serde_json::Value) {
    common::validate_junit_schema(path);
    let script = r#"
import sys, json, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
names = [f'{s.get("name")} | {c.get("classname")} | {c.get("name")}' for s in root for c in s.findall("testcase")]
suite = root[0]
props = {p.get("name"): p.get("value") for p in suite.iter("property")}
out = suite.find("system-out")
print(json.dumps({"names": names, "attrs": suite.attrib, "props": props, "out": out.text if out is not None else None}))
"#;
    let out = Command::new("python3").args(["-c", script]).arg(path).output().unwrap();
    assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names = v["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    (names, v)
}

#[test]
fn junit_names_stay_the_same_across_runs_paths_and_invocations() {
    let dir = std::env::temp_dir().join(format!("sts-junit-stable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap();
    let j = |name: &str| dir.join(name).to_str().unwrap().to_string();
    // The same config typed as an absolute path and as a relative one.
    let absolute = root.join("examples/fuzz-ovs-mesh.toml");
    let runs = [(absolute.to_str().unwrap().to_string(), "a"), ("examples/fuzz-ovs-mesh.toml".to_string(), "b")];
    for (config, tag) in &runs {
        let out = Command::new(env!("CARGO_BIN_EXE_sts"))
            .current_dir(&root)
            .args(["fuzz", "--config", config, "--out", &j(tag), "--junit", &j(&format!("fuzz-{tag}.xml"))])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (a, facts) = names_and_facts(&dir.join("fuzz-a.xml"));
    let (b, _) = names_and_facts(&dir.join("fuzz-b.xml"));
    assert_eq!(a, b, "a fuzz case is named by the config's name, not its path");
    assert_eq!(a, vec!["sts fuzz | sts.fuzz | fuzz-ovs-mesh.toml seed 3".to_string()]);
    // What changes between runs is beside the names.
    for attr in ["timestamp", "time", "hostname"] {
        assert!(facts["attrs"][attr].as_str().is_some_and(|v| !v.is_empty()), "{attr}: {facts}");
    }
    assert_eq!(facts["props"]["seed"], "3", "{facts}");
    assert_eq!(facts["props"]["controllers"], "ovs-testcontroller", "{facts}");
    assert_eq!(facts["props"]["sts.version"], env!("CARGO_PKG_VERSION"), "{facts}");
    assert_eq!(facts["props"]["config.sha256"].as_str().map(str::len), Some(64), "{facts}");
    assert!(facts["out"].as_str().is_some_and(|o| o.contains("trace.jsonl")), "{facts}");

    // Two invocations of replay on one experiment: the second no longer
    // counts on from the first ("replay 2").
    for n in ["1", "2"] {
        let (code, err) = sts(&["replay", &j("a"), "--junit", &j(&format!("replay-{n}.xml"))]);
        assert_eq!(code, 1, "{err}");
    }
    let (first, _) = names_and_facts(&dir.join("replay-1.xml"));
    let (second, _) = names_and_facts(&dir.join("replay-2.xml"));
    assert_eq!(first, second);
    assert!(first[0].starts_with("sts replay | sts.replay | ") && first[0].ends_with(" (replay 1 of 1)"), "{first:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
