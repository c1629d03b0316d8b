//! The HTML report in a real browser (headless Chromium, installed by
//! scripts/setup): a fuzzed and minimized experiment's `report/index.html`
//! has a lane for sts, the controller and every switch, one arrow per
//! recorded OpenFlow message, the MCS's inputs highlighted and the violation
//! marked; it renders to a screenshot; its message-type filter hides arrows.

use std::path::Path;
use std::process::Command;

fn chromium(args: &[&str], page: &Path) -> String {
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs (scripts/setup installs it)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn count(dom: &str, needle: &str) -> usize {
    dom.matches(needle).count()
}

#[test]
fn a_minimized_run_renders_as_a_space_time_diagram() {
    let dir = std::env::temp_dir().join(format!("sts-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fuzz-ovs-mesh.toml");
    let sts = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_sts")).args(args).output().expect("run sts");
    let fuzz = sts(&["fuzz", "--config", config.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(fuzz.status.code(), Some(1), "{}", String::from_utf8_lossy(&fuzz.stderr));
    assert!(dir.join("report/index.html").exists(), "fuzz writes the report");
    let min = sts(&["minimize", dir.to_str().unwrap(), "--final-replays", "1"]);
    assert!(min.status.success(), "{}", String::from_utf8_lossy(&min.stderr));
    let page = dir.join("report/index.html");

    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).unwrap();
    let messages = count(&trace, r#""type":"openflow""#);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("mcs/report.json")).unwrap()).unwrap();
    let mcs_inputs = report["mcs_inputs"].as_u64().unwrap() as usize;

    let dom = chromium(&["--dump-dom"], &page);
    for lane in ["sts", "c0", "s1", "s2", "s3", "s4"] {
        assert!(dom.contains(&format!(r#"data-lane="{lane}""#)), "a lane for {lane}");
    }
    assert_eq!(count(&dom, r#"<line class="msg "#), messages, "one arrow per OpenFlow message");
    // Each message's hover text holds it decoded: a PACKET_IN's port, reason and frame.
    assert!(dom.contains(" reason=no_match: arp who-has 10.0.0."), "a decoded PACKET_IN");
    let frames = count(&trace, r#""type":"frame""#);
    assert!(frames > 0 && dom.contains(r#"data-lane="h1""#), "a lane per host, for its frames");
    assert_eq!(count(&dom, r#"<circle class="frame "#), frames, "one dot per host frame");
    assert_eq!(count(&dom, r#"<circle class="input mcs""#), mcs_inputs, "the MCS's inputs highlighted");
    assert!(count(&dom, r#"<circle class="input""#) > mcs_inputs, "the other inputs drawn plainly");
    assert_eq!(count(&dom, r#"class="violation""#), 1, "the violation marked");
    assert!(dom.contains(r#"id="mcs""#) && dom.contains("minimal causal sequence: 1 of"), "the MCS said");
    let curve = report["curve"].as_array().unwrap().len();
    assert!(dom.contains(r#"<polyline class="curve""#), "the reduction curve is drawn");
    assert_eq!(count(&dom, r#"class="curve-point""#), curve, "one point per reduction");

    // The filter: a page whose script unticks packet_in hides those arrows.
    // The violation's row: never hidden by the filters below.
    let violation_seq: u64 = trace
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r.get("violation").is_some())
        .and_then(|r| r["seq"].as_u64())
        .unwrap();
    let unticked = std::fs::read_to_string(&page).unwrap().replace(
        "</script></body>",
        &format!(
            "document.querySelector('input[data-type=packet_in]').click();\
         document.body.dataset.hidden=getComputedStyle(document.querySelector('.t-packet_in')).display;\
         document.body.dataset.shown=getComputedStyle(document.querySelector('.sw-s1')).display;\
         document.querySelector('input[data-switch=s1]').click();\
         document.querySelector('input[data-kind=frame]').click();\
         document.body.dataset.switch=getComputedStyle(document.querySelector('.sw-s1')).display;\
         document.body.dataset.frames=getComputedStyle(document.querySelector('.frame')).display;\
         document.body.dataset.others=getComputedStyle(document.querySelector('.sw-s2.t-flow_mod')).display;\
         window.scrollTo(0, 3000);\
         document.body.dataset.laneTop=Math.round(document.querySelector('#lanes text').getBoundingClientRect().top);\
         document.body.dataset.scrolled=Math.round(window.scrollY);\
         var f=document.getElementById('find'); f.value='hello'; f.dispatchEvent(new Event('input'));\
         document.body.dataset.textHits=document.querySelectorAll('#diagram .hit').length;\
         window.scrollTo(0, 0); f.value='seq {violation_seq}'; f.dispatchEvent(new Event('input'));\
         f.dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter'}}));\
         document.body.dataset.found=document.getElementById('found').textContent;\
         document.body.dataset.jumped=Math.round(window.scrollY);\
         document.body.dataset.labelsBefore=document.querySelectorAll('#diagram text.arrow-label').length;\
         document.getElementById('zoom-in').click(); document.getElementById('zoom-in').click();\
         document.body.dataset.labels=document.querySelectorAll('#diagram text.arrow-label').length;\
         document.querySelector('#diagram line.t-flow_mod').dispatchEvent(new MouseEvent('click', {{bubbles: true}}));\
         document.body.dataset.pinned=document.getElementById('tip').className+' '+document.getElementById('tip').textContent;</script></body>"
        ),
    );
    let probe = dir.join("report/probe.html");
    std::fs::write(&probe, unticked).unwrap();
    let dom = chromium(&["--dump-dom"], &probe);
    assert!(dom.contains(r#"data-hidden="none""#), "unticking packet_in hides its arrows");
    assert!(dom.contains(r#"data-shown="inline""#), "s1's messages shown before");
    assert!(dom.contains(r#"data-switch="none""#), "unticking s1 hides its messages");
    assert!(dom.contains(r#"data-frames="none""#), "unticking host frames hides them");
    assert!(dom.contains(r#"data-others="inline""#), "s2's FLOW_MODs stay");
    // Scrolled far down the diagram, the lane names are still in sight.
    assert!(dom.contains(r#"data-scrolled="3000""#), "the page scrolled");
    let top: i64 = dom.split(r#"data-lane-top=""#).nth(1).and_then(|r| r.split('"').next()).unwrap().parse().unwrap();
    assert!((0..300).contains(&top), "lane names at {top} px from the top after scrolling");
    // Find: text marks every element whose hover text holds it; a seq jumps to its row.
    let attr =
        |name: &str| dom.split(&format!(r#"{name}=""#)).nth(1).and_then(|r| r.split('"').next()).unwrap().to_string();
    assert!(attr("data-text-hits").parse::<usize>().unwrap() >= 4, "a HELLO per switch: {}", attr("data-text-hits"));
    assert!(attr("data-found").starts_with("1 of "), "seq {violation_seq} found: {}", attr("data-found"));
    assert!(attr("data-jumped").parse::<i64>().unwrap() > 0, "the page jumped down to the violation's row");
    // Zoomed in, the arrows in sight carry their messages as labels (none before).
    assert_eq!(attr("data-labels-before"), "0", "no labels at the first zoom");
    assert!(attr("data-labels").parse::<usize>().unwrap() > 10, "labels when zoomed in: {}", attr("data-labels"));
    // A click pins the decoded message: a FLOW_MOD in dump-flows words.
    let pinned = attr("data-pinned");
    assert!(pinned.starts_with("pinned seq ") && pinned.contains("flow_mod: c0 → s"), "{pinned}");
    assert!(pinned.contains(" add priority=") && pinned.contains("actions=output:"), "{pinned}");

    let shot = dir.join("report/screenshot.png");
    chromium(&["--window-size=1100,1400", &format!("--screenshot={}", shot.display())], &page);
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real picture ({} bytes)", png.len());

    // The flow tables at the violation, one per switch, holding the learned entries.
    for sw in ["s1", "s2", "s3", "s4"] {
        assert!(dom.contains(&format!(r#"data-switch="{sw}""#)), "the flow table of {sw}");
    }
    assert!(count(&dom, "priority=") > 0, "entries are shown");

    // The MCS set beside its own replay.
    assert!(dom.contains("Trace diff: the MCS against its replay 1"), "the MCS's diff");

    // After `sts replay`, the page sets the original beside the replay, the first divergence marked.
    let replay = sts(&["replay", dir.to_str().unwrap()]);
    assert!(replay.status.code().is_some_and(|c| c <= 1), "{}", String::from_utf8_lossy(&replay.stderr));
    let dom = chromium(&["--dump-dom"], &page);
    assert!(dom.contains("Trace diff: original against replay 1"), "the replay's diff");
    let same = count(&dom, r#"<tr class="same""#);
    let inputs = trace.matches(r#""external":"#).count();
    assert!(same >= inputs, "every input of the original aligned with the replay's ({same} rows, {inputs} inputs)");
    let marked = count(&dom, r#"id="first-divergence""#) + count(&dom, r#"id="no-divergence""#);
    assert_eq!(marked, 1, "the first divergence (or its absence) is said once");
}

/// The network at the violation, drawn: a live console session where h3
/// leaves s3 after talking to h1 (os-ken keeps the rule for h3 on s3), and
/// `sts report` of it: every switch and host a node, the switch links, and
/// the witness as arrows h1 → s1 → s2 → s3 with the drop marked.
#[test]
fn the_report_draws_the_network_with_the_witness_path() {
    let base = std::env::temp_dir().join(format!("sts-html-topology-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let dir = base.join("session");
    let script = base.join("script.txt");
    std::fs::write(&script, "ping h1 h3\nrun-to +1s\nmigrate h3 s1\nrun-to +3s\nquit\n").unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/migration/config.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["console", "--config", config.to_str().unwrap(), dir.to_str().unwrap()])
        .args(["--script", script.to_str().unwrap()])
        .output()
        .expect("run sts console");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("the violation showed up"), "{said}");
    let report = Command::new(env!("CARGO_BIN_EXE_sts")).arg("report").arg(&dir).output().expect("run sts report");
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));

    let dom = chromium(&["--dump-dom"], &dir.join("report/index.html"));
    let section = &dom[dom.find(r#"<section id="topology">"#).expect("a topology section")..];
    let section = &section[..section.find("</section>").unwrap()];
    for node in ["s1", "s2", "s3", "h1", "h2", "h3"] {
        assert_eq!(count(section, &format!(r#"data-node="{node}""#)), 1, "{node} drawn once: {section}");
    }
    assert_eq!(count(section, r#"<line class="link""#), 2, "linear-3 has two switch links: {section}");
    assert_eq!(count(section, r#"class="witness""#), 3, "h1 → s1 → s2 → s3: {section}");
    for (hop, what) in [(0, "h1 → s1"), (1, "s1 → s2"), (2, "s2 → s3")] {
        assert!(section.contains(&format!(r#"data-hop="{hop}""#)) && section.contains(what), "{what}: {section}");
    }
    assert_eq!(count(section, r#"class="drop""#), 1, "the drop at s3 is marked");
    assert!(section.contains("output port 1 is down"), "{section}");
    assert_eq!(count(section, r#"class="node host on-path""#), 1, "only h1 is on the path");
}

/// The report explains against a frame that arrives: in a replay of the
/// migration example (h3 moves from s3 to s1), h2 → h3 is delivered while
/// h1 → h3 is not, and the page names s1 as where they part, with the
/// stale rule h1's frame meets (to s2) and the fresh one h2's meets (to h3's
/// new port).
#[test]
fn the_report_says_where_the_victims_path_and_a_working_one_part() {
    let base = std::env::temp_dir().join(format!("sts-html-parting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/traces/migration");
    for f in ["config.toml", "trace.jsonl"] {
        std::fs::copy(src.join(f), base.join(f)).unwrap();
    }
    let replay = Command::new(env!("CARGO_BIN_EXE_sts")).arg("replay").arg(&base).output().expect("run sts replay");
    assert_eq!(replay.status.code(), Some(1), "reproduced: {}", String::from_utf8_lossy(&replay.stderr));
    let run = base.join("replays/1");
    let report = Command::new(env!("CARGO_BIN_EXE_sts")).arg("report").arg(&run).output().expect("run sts report");
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let dom = chromium(&["--dump-dom"], &run.join("report/index.html"));
    let why = &dom[dom.find(r#"<section id="why">"#).expect("a why section")..];
    let parting = &why[why.find(r#"<div id="parting">"#).expect("where the paths part")..];
    let parting = &parting[..parting.find("</div>").unwrap()];
    assert!(parting.contains("h2 → h3 is delivered"), "{parting}");
    assert!(parting.contains("part at <b>s1</b>"), "{parting}");
    assert!(
        parting.contains("<li>h1 → h3 meets <code>priority=1,in_port=1,dl_src=00:00:00:00:00:01,dl_dst=00:00:00:00:00:03 actions=output:2</code>"),
        "{parting}"
    );
    assert!(parting.contains("dl_src=00:00:00:00:00:02,dl_dst=00:00:00:00:00:03 actions=output:3</code>"), "{parting}");
    // The replay's directory has no config of its own: the experiment's is used, so the network is drawn too.
    assert!(dom.contains(r#"<section id="topology">"#));
    let _ = std::fs::remove_dir_all(&base);
}
