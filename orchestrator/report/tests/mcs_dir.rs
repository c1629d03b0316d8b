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
    assert!(t.contains("priority=1,in_port=1,eth_dst=00:00:00:00:00:03,eth_src=00:00:00:00:00:02"), "{t}");
    assert!(page.contains("as its final replay 1 recorded it"), "the page says which run it shows");
    // The same tables as the replay's own report.
    let replay = std::fs::read_to_string(sts_report::html::write_experiment(&dir.join("final/1")).unwrap()).unwrap();
    assert_eq!(t, tables(&replay));
    let _ = std::fs::remove_dir_all(&dir);
}
