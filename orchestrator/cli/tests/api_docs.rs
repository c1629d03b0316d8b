//! docs/api.md's curl session, run verbatim: every ```sh block, in order,
//! against a fresh `sts serve` on 127.0.0.1:7878, from a directory whose
//! `examples/` is the repository's. A block must exit 0 and its output must
//! hold no API error, unless it is marked `{expect-error}`: then it must
//! hold one per command. A block marked `{prelude}` (the token's header) is
//! run before each block after it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The ```sh blocks of a Markdown text, with whether each expects errors,
/// each with the `{prelude}` blocks before it in front.
fn sh_blocks(markdown: &str) -> Vec<(String, bool)> {
    let mut blocks = Vec::new();
    let mut prelude = String::new();
    let mut current: Option<(String, bool)> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.starts_with("```sh {prelude}") => current = Some((String::from("#prelude\n"), false)),
            None if line.starts_with("```sh") => current = Some((prelude.clone(), line.contains("{expect-error}"))),
            Some((text, _)) if line.starts_with("```") && text.starts_with("#prelude\n") => {
                prelude.push_str(&text["#prelude\n".len()..]);
                current = None;
            }
            None => {}
            Some(_) if line.starts_with("```") => blocks.push(current.take().unwrap()),
            Some((text, _)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    blocks
}

/// Kills the server however the test ends (a failed block included).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_api_guide_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let guide = std::fs::read_to_string(root.join("docs/api.md")).unwrap();
    let blocks = sh_blocks(&guide);
    assert!(blocks.len() >= 6, "the guide has its session");

    let scratch = std::env::temp_dir().join(format!("sts-api-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let work = scratch.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::os::unix::fs::symlink(root.join("examples").canonicalize().unwrap(), work.join("examples")).unwrap();

    assert!(
        std::net::TcpListener::bind("127.0.0.1:7878").is_ok(),
        "port 7878 is taken: the guide's commands need it free"
    );
    let server = Command::new(env!("CARGO_BIN_EXE_sts"))
        .arg("serve")
        .current_dir(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(server);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect("127.0.0.1:7878").is_err() {
        assert!(Instant::now() < deadline, "sts serve did not listen on 7878");
        std::thread::sleep(Duration::from_millis(50));
    }

    for (block, expect_error) in &blocks {
        let out = Command::new("bash").args(["-eo", "pipefail", "-c", block]).current_dir(&work).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let said = format!("{block}\n--- stdout:\n{stdout}\n--- stderr:\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "this block failed:\n{said}");
        let errors = stdout.matches("\"error\":\"").count();
        if *expect_error {
            let commands = block.lines().filter(|l| l.starts_with("curl")).count();
            assert_eq!(errors, commands, "each command answers an error:\n{said}");
            assert!(stdout.contains("\"status\":400"), "{said}");
        } else {
            assert_eq!(errors, 0, "no API error:\n{said}");
        }
    }
    // What the session shows happened.
    let token = std::fs::read_to_string(work.join("sts-data/token")).unwrap();
    let auth = format!("Authorization: Bearer {}", token.trim());
    let listing = Command::new("curl").args(["-s", "-H", &auth, "http://127.0.0.1:7878/jobs"]).output().unwrap();
    let jobs: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap();
    let outcomes: Vec<&str> = jobs.as_array().unwrap().iter().map(|j| j["outcome"].as_str().unwrap_or("-")).collect();
    assert_eq!(outcomes, ["violation", "ok", "cancelled"], "fuzz, minimize, (replay deleted), cancelled replay");
    for file in ["report.html", "trace.pcapng", "junit.xml", "mcs.tar.gz"] {
        assert!(std::fs::metadata(work.join(file)).unwrap().len() > 100, "{file} downloaded");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
