//! `sts report DIR --shiviz`: the log parses with the regular expression sts
//! prints, and its vector clocks are what ShiViz requires (checked by an
//! independent script): every event's clock has its own lane, each lane's
//! own entry counts 1, 2, 3 ..., clocks never go back, and a receive knows
//! everything its send knew.

use std::process::Command;

#[test]
fn a_fuzz_trace_becomes_a_valid_shiviz_log() {
    let dir = std::env::temp_dir().join(format!("sts-shiviz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let sts = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    let fuzz = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(fuzz.status.code(), Some(1), "{}", String::from_utf8_lossy(&fuzz.stderr));
    let out = sts(&["report", dir.to_str().unwrap(), "--shiviz"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    let regex = printed.lines().find_map(|l| l.split_once("regular expression: ")).expect("the regex is printed").1;

    let script = r#"
import json, re, sys
regex = sys.argv[2].replace("(?<", "(?P<")   # ShiViz's JavaScript groups, in Python's spelling
text = open(sys.argv[1]).read()
events = [m.groupdict() for m in re.finditer(regex, text)]
assert len(events) * 2 == text.count("\n"), (len(events), text.count("\n"))
last = {}
sends = 0
for i, e in enumerate(events):
    host, clock = e["host"], json.loads(e["clock"])
    assert clock.get(host) == last.get(host, {}).get(host, 0) + 1, (i, e)
    assert all(clock.get(k, 0) >= v for k, v in last.get(host, {}).items()), (i, e)
    if " from " in e["event"]:
        sender = events[i - 1]
        sent = json.loads(sender["clock"])
        assert all(clock.get(k, 0) >= v for k, v in sent.items()), (i, e, sender)
        sends += 1
    last[host] = clock
assert {"sts", "c0", "s1"} <= set(last), set(last)
print(len(events), sends)
"#;
    let check = Command::new("python3").args(["-c", script]).arg(dir.join("trace.shiviz")).arg(regex).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let counts = String::from_utf8_lossy(&check.stdout);
    let n: Vec<usize> = counts.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert!(n[0] > 100 && n[1] > 50, "a real session: {counts}");
}
