//! `sts report DIR/mcs`: a minimization's own directory. Its `trace.jsonl`
//! is what the replays were given (the kept inputs and the messages before
//! the first), so the page is drawn from the run its first reproducing final
//! replay recorded: the flow tables hold the rules the witness cites.
//! (The fixture: os-ken's simple_switch_13 under `fuzz-osken13-migration`,
//! minimized to a ping and a migration.)

use std::path::{Path, PathBuf};

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn tables(page: &str) -> &str {
    let start = page.find(r#"id="tables""#).expect("a flow-table section");
    &page[start..start + page[start..].find("<script").unwrap_or(page.len() - start)]
}

#[test]
fn a_minimizations_own_report_shows_the_tables_its_run_had() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcs-osken");
    let dir: PathBuf = std::env::temp_dir().join(format!("sts-mcs-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&fixture, &dir);
    let page = std::fs::read_to_string(sts_report::html::write_experiment(&dir).unwrap()).unwrap();
    let t = tables(&page);
    // The rules os-ken learned after the ping, which the witness cites
    // (s2 table 0, priority 1), are there, not only the table-miss entries.
    assert!(t.contains("priority=1,in_port=1,dl_src=00:00:00:00:00:02,dl_dst=00:00:00:00:00:03"), "{t}");
    assert!(page.contains("as its final replay 1 recorded it"), "the page says which run it shows");
    // The same tables as the replay's own report.
    let replay = std::fs::read_to_string(sts_report::html::write_experiment(&dir.join("final/1")).unwrap()).unwrap();
    assert_eq!(t, tables(&replay));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The page explains: the culprit rule (marked in the flow tables), the
/// FLOW_MOD that installed it, the PACKET_IN and input before it, and the
/// MCS as a numbered list; every link lands on a row of the diagram.
#[test]
fn the_report_chains_the_culprit_to_its_flow_mod_and_input() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcs-osken");
    let dir: PathBuf = std::env::temp_dir().join(format!("sts-why-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&fixture, &dir);
    let page = std::fs::read_to_string(sts_report::html::write_experiment(&dir).unwrap()).unwrap();
    let why = &page[page.find(r#"<section id="why">"#).expect("a why section")..];
    let why = &why[..why.find("</section>").unwrap()];
    assert!(
        why.contains("The culprit: on s2")
            && why.contains("priority=1,in_port=3,dl_src=00:00:00:00:00:03,dl_dst=00:00:00:00:00:02 actions=output:1"),
        "{why}"
    );
    assert!(why.contains("installed by") && why.contains("flow_mod c0 → s2"), "{why}");
    assert!(why.contains("packet_in s2 → controller"), "{why}");
    // The rule came after the MCS's own ping (seq 19): the chain ends on an MCS input.
    assert!(why.contains(r##"after the input <a href="#r19">"##) && why.contains("ping h3 -&gt; h2"), "{why}");
    assert_eq!(why.matches("<li><a href=\"#r").count(), 2, "the MCS's two inputs listed: {why}");
    assert_eq!(page.matches(r#"<mark id="culprit-rule">"#).count(), 1, "the rule marked once in the tables");
    for target in why.match_indices("href=\"#r").map(|(i, _)| &why[i + 7..]) {
        let id = &target[..target.find('"').unwrap()];
        assert!(page.contains(&format!(r#"id="{id}""#)), "{id} is a row of the diagram");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
