//! `sts serve` end to end: a real server (the `sts` binary), real jobs with
//! real controllers, driven through `sts-client`. Jobs run, their results
//! download, a cancel kills a job and its controllers, a server SIGKILLed
//! mid-way loses nothing and leaves no controller behind, hostile requests
//! get a 4xx and the server goes on, a token guards every route, and the
//! index and a report open in headless Chromium.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sts_client::{Client, Error, JobRequest, Kind, Outcome, State};

const WAIT: Duration = Duration::from_secs(300);

/// A running `sts serve`; killed (SIGKILL) when dropped.
struct Server {
    child: Child,
    addr: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    fn start(data: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sts"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sts serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut before_listening = String::new();
        let addr = loop {
            line.clear();
            assert!(lines.read_line(&mut line).unwrap() > 0, "sts serve ended before listening: {before_listening}");
            before_listening.push_str(&line);
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().to_string();
            }
        };
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(before_listening));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = lines.read_to_string(&mut rest);
            sink.lock().unwrap().push_str(&rest);
        });
        Server { child, addr, stderr }
    }

    fn client(&self) -> Client {
        Client::new(format!("http://{}", self.addr))
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sts-serve-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap()
}

fn example(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)).unwrap()
}

/// A fuzz config that finds no bug and takes a few seconds of real time
/// (traffic only, many steps, on virtual time).
fn long_config(steps: u32) -> String {
    format!(
        "[network]\ntopology = \"linear\"\nsize = 3\nopenflow = \"1.0\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n\
         [fuzz]\nseed = 1\nsteps = {steps}\nstep_ms = 50\n\n[fuzz.rates]\ntraffic = 0.5\nlink_failure = 0.0\n\
         link_recovery = 0.0\nhost_migration = 0.0\n"
    )
}

/// Processes working in `data` (jobs and the controllers they started),
/// other than `except`.
fn processes_under(data: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(cwd) = std::fs::read_link(e.path().join("cwd")) else { continue };
        if cwd.starts_with(data) {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            found.push(format!("{pid}: {}", String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    found
}

fn no_processes_left(data: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_under(data);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn api_status(r: Result<impl std::fmt::Debug, Error>) -> u16 {
    match r {
        Err(Error::Api(e)) => {
            assert!(!e.error.is_empty(), "an error says what");
            e.status
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[test]
fn jobs_run_and_their_results_download() {
    let data = scratch("jobs");
    let server = Server::start(&data, &["--workers", "2"]);
    let c = server.client();
    assert_eq!(c.version().unwrap().api, 1);

    let fuzz = c.submit(&JobRequest::fuzz(example("fuzz-ovs-mesh.toml"))).unwrap();
    assert_eq!((fuzz.kind, fuzz.state), (Kind::Fuzz, State::Queued));
    let fuzz = c.wait(fuzz.id, WAIT).unwrap();
    assert_eq!(
        (fuzz.state, fuzz.outcome, fuzz.exit_code),
        (State::Succeeded, Some(Outcome::Violation), Some(1)),
        "{fuzz:?}"
    );
    assert!(fuzz.summary.as_deref().is_some_and(|s| s.starts_with("loop: ")), "{:?}", fuzz.summary);
    let log = c.log(fuzz.id).unwrap();
    assert!(log.contains("$ sts --progress json fuzz") && log.contains("\"phase\":\"fuzz\""), "{log}");

    let mut min = JobRequest::minimize_of(fuzz.id);
    min.final_replays = Some(2);
    let min = c.wait(c.submit(&min).unwrap().id, WAIT).unwrap();
    assert_eq!(
        (min.state, min.outcome),
        (State::Succeeded, Some(Outcome::Ok)),
        "{:?}\n{}",
        min,
        c.log(min.id).unwrap()
    );
    let said = min.summary.as_deref().unwrap_or("");
    assert!(said.starts_with("minimal causal sequence: ") && said.ends_with("of 2 final replays"), "{said}");
    let junit = String::from_utf8(c.artifact(min.id, "junit.xml").unwrap()).unwrap();
    assert!(junit.contains("<testsuite name=\"sts minimize run\"") && junit.contains("<failure"), "{junit}");
    let pcap = c.artifact(min.id, "trace.pcap").unwrap();
    assert_eq!(&pcap[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "a pcap file (little-endian magic)");
    let report = String::from_utf8(c.artifact(min.id, "report.html").unwrap()).unwrap();
    assert!(report.contains("<svg") && report.contains("minimal causal sequence"), "the report shows the MCS");
    let tarball = c.artifact(min.id, "experiment.tar.gz").unwrap();
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&tarball[..]));
    for e in archive.entries().unwrap() {
        names.push(e.unwrap().path().unwrap().display().to_string());
    }
    for want in [format!("job-{}/trace.jsonl", min.id), format!("job-{}/mcs/trace.jsonl", min.id)] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }

    // The downloaded experiment, uploaded again, replays as the original did.
    let mut upload = tar::Builder::new(Vec::new());
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&tarball[..]));
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().into_owned();
        let mut header = e.header().clone();
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).unwrap();
        upload.append_data(&mut header, path, &bytes[..]).unwrap();
    }
    let replay = JobRequest {
        kind: Some(Kind::Replay),
        experiment: Some(format!("job-{}/mcs", min.id)),
        expect: Some(sts_client::Expect::Reproduce),
        ..JobRequest::default()
    };
    let replay = c.submit_with_files(&replay, &upload.into_inner().unwrap()).unwrap();
    let replay = c.wait(replay.id, WAIT).unwrap();
    assert_eq!(replay.outcome, Some(Outcome::Ok), "the MCS reproduces: {}", c.log(replay.id).unwrap());
    assert_eq!(replay.summary.as_deref(), Some("reproduced in 1 of 1 replay(s)"));

    // A campaign: three seeds, each distinct bug minimized.
    let mut campaign = JobRequest::campaign(example("fuzz-ovs-mesh.toml"), "1..3");
    campaign.final_replays = Some(1);
    let campaign = c.wait(c.submit(&campaign).unwrap().id, WAIT).unwrap();
    assert_eq!(
        (campaign.state, campaign.outcome),
        (State::Succeeded, Some(Outcome::Violation)),
        "{}",
        c.log(campaign.id).unwrap()
    );
    assert!(campaign.summary.as_deref().unwrap_or("").starts_with("3 seeds, "), "{:?}", campaign.summary);
    let md = String::from_utf8(c.artifact(campaign.id, "summary.md").unwrap()).unwrap();
    assert!(md.starts_with("# Campaign: 3 seeds"), "{md}");
    assert_eq!(api_status(c.submit(&JobRequest::campaign("x", "9..1"))), 400, "bad seeds");
    c.delete(campaign.id).unwrap();

    // Lists, filters, deletes.
    assert_eq!(c.jobs().unwrap().len(), 3);
    assert!(c.jobs().unwrap().iter().all(|j| j.state == State::Succeeded));
    c.delete(fuzz.id).unwrap();
    assert_eq!(api_status(c.job(fuzz.id)), 404);
    assert!(!data.join("jobs").join(fuzz.id.to_string()).exists(), "its files went with it");
    assert_eq!(c.job(min.id).unwrap().state, State::Succeeded, "jobs made from it keep their copy");
    drop(server);
    no_processes_left(&data);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_cancel_kills_the_job_and_its_controllers() {
    let data = scratch("cancel");
    let server = Server::start(&data, &["--workers", "1"]);
    let c = server.client();
    let running = c.submit(&JobRequest::fuzz(long_config(200_000))).unwrap();
    let queued = c.submit(&JobRequest::fuzz(long_config(10))).unwrap();
    let deadline = Instant::now() + WAIT;
    // Caught fuzzing (its trace is being written).
    while c.job(running.id).unwrap().progress.is_none_or(|p| p["phase"] != "fuzz") {
        assert!(Instant::now() < deadline, "the job never reported fuzzing");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_under(&data).is_empty(), "the job's processes run in its directory");
    let cancelled = c.cancel(queued.id).unwrap();
    assert_eq!((cancelled.state, cancelled.outcome), (State::Cancelled, Some(Outcome::Cancelled)));
    let cancelled = c.cancel(running.id).unwrap();
    assert_eq!((cancelled.state, cancelled.outcome), (State::Cancelled, Some(Outcome::Cancelled)), "{cancelled:?}");
    no_processes_left(&data);
    let trace = std::fs::read_to_string(data.join(format!("jobs/{}/run/trace.jsonl", running.id))).unwrap();
    assert!(trace.ends_with('\n'), "the trace stays readable: whole lines");
    // Cancelling a final job changes nothing.
    assert_eq!(c.cancel(running.id).unwrap().state, State::Cancelled);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_server_killed_twice_loses_nothing() {
    let data = scratch("restart");
    let mut server = Server::start(&data, &["--workers", "2"]);
    let c = server.client();
    // Jobs long enough to be caught running, and bug-finding ones.
    let mut submitted = Vec::new();
    for i in 0..6 {
        let req = if i % 2 == 0 {
            JobRequest::fuzz(long_config(8000))
        } else {
            JobRequest::fuzz(example("fuzz-ovs-mesh.toml"))
        };
        let expected = if i % 2 == 0 { Outcome::Ok } else { Outcome::Violation };
        submitted.push((c.submit(&req).unwrap().id, expected));
    }
    for round in 0..2 {
        let c = server.client();
        let deadline = Instant::now() + WAIT;
        while !c.jobs().unwrap().iter().any(|j| j.state == State::Running && j.progress.is_some()) {
            assert!(Instant::now() < deadline, "no job ran (round {round})");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.kill();
        no_processes_left(&data);
        server = Server::start(&data, &["--workers", "2"]);
        let said = server.stderr.lock().unwrap().clone();
        assert!(said.contains("running again the jobs"), "the restart says what it requeued: {said}");
    }
    let c = server.client();
    let mut restarted = 0;
    for (id, expected) in submitted {
        let job = c.wait(id, WAIT).unwrap();
        assert_eq!(
            (job.state, job.outcome),
            (State::Succeeded, Some(expected)),
            "job {id}: {job:?}\n{}",
            c.log(id).unwrap()
        );
        restarted += usize::from(job.attempts > 1);
        let log = c.log(id).unwrap();
        assert_eq!(log.matches("$ sts ").count(), job.attempts as usize, "one run per attempt: {log}");
    }
    assert!(restarted >= 2, "each kill interrupted a running job");
    drop(server);
    no_processes_left(&data);
    let check = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('PRAGMA integrity_check').fetchone()[0])",
        ])
        .arg(data.join("jobs.sqlite"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "ok", "the store is sound");
    let _ = std::fs::remove_dir_all(&data);
}

/// Sends raw bytes and returns the status code of the answer.
fn raw_status(addr: &str, request: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let _ = s.write_all(request);
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no HTTP answer: {text:?}"))
}

fn tar_with(name: &str, kind: tar::EntryType) -> Vec<u8> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(0);
    h.set_mode(0o644);
    if kind.is_symlink() {
        h.set_link_name("/etc").unwrap();
    }
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_cksum();
    let mut b = tar::Builder::new(Vec::new());
    b.append(&h, &[][..]).unwrap();
    b.into_inner().unwrap()
}

#[test]
fn hostile_requests_get_a_4xx_and_the_server_goes_on() {
    let data = scratch("hostile");
    let server = Server::start(&data, &["--workers", "2"]);
    let c = server.client();
    let post = |body: &str| -> u16 {
        let req = format!(
            "POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        raw_status(&server.addr, req.as_bytes())
    };
    assert_eq!(post("{\"kind\": \"fuzz\", "), 400, "malformed JSON");
    assert_eq!(post("[1,2,3]"), 400, "not an object");
    assert_eq!(post("{\"kind\": \"format-disk\"}"), 400, "an unknown kind");
    assert_eq!(post("{\"kind\": \"fuzz\", \"config\": \"\", \"sudo\": true}"), 400, "an unknown field");
    assert_eq!(post("{\"kind\": \"fuzz\", \"config\": \"[network\\ntopology = 3\"}"), 400, "a broken config");
    assert_eq!(post("{\"kind\": \"replay\", \"from_job\": 999}"), 404, "no such job");
    assert_eq!(post("{\"kind\": \"replay\", \"experiment\": \"../../etc\"}"), 400, "an experiment outside the data");
    let mut escape = JobRequest::fuzz(long_config(10));
    for name in ["../escape.txt", "/tmp/escape.txt", "a/../../escape.txt", ""] {
        escape.files = [(name.to_string(), "x".to_string())].into();
        assert_eq!(api_status(c.submit(&escape)), 400, "file name {name:?}");
    }
    assert!(!data.join("escape.txt").exists() && !data.parent().unwrap().join("escape.txt").exists());
    let upload = JobRequest { kind: Some(Kind::Fuzz), config_file: Some("c.toml".into()), ..JobRequest::default() };
    for (name, kind) in [
        ("../../escape.toml", tar::EntryType::Regular),
        ("/etc/escape.toml", tar::EntryType::Regular),
        ("c.toml", tar::EntryType::Symlink),
        ("c.toml", tar::EntryType::Link),
    ] {
        assert_eq!(api_status(c.submit_with_files(&upload, &tar_with(name, kind))), 400, "tar entry {name} {kind:?}");
    }
    assert_eq!(api_status(c.submit_with_files(&upload, b"garbage, not a tar")), 400, "not a tar");
    // A 1 GiB body is refused from its length, before it is read.
    let huge = raw_status(
        &server.addr,
        b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"kind\":",
    );
    assert_eq!(huge, 413);
    // ... and a chunked one as it comes.
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(b"POST /jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").unwrap();
    let chunk = vec![b' '; 1 << 20];
    let mut refused = false;
    for _ in 0..100 {
        if s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|()| s.write_all(&chunk))
            .and_then(|()| s.write_all(b"\r\n"))
            .is_err()
        {
            refused = true;
            break;
        }
    }
    if !refused {
        let mut answer = [0u8; 64];
        let n = s.read(&mut answer).unwrap_or(0);
        assert!(String::from_utf8_lossy(&answer[..n]).contains(" 413 "), "{:?}", String::from_utf8_lossy(&answer[..n]));
    }
    assert_eq!(raw_status(&server.addr, b"GET /jobs/abc HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "a bad id");
    assert_eq!(raw_status(&server.addr, b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    assert_eq!(raw_status(&server.addr, b"GET /jobs?state=weird HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    assert_eq!(raw_status(&server.addr, b"DELETE /jobs/1 HTTP/1.1\r\nHost: x\r\n\r\n"), 404);
    assert_eq!(raw_status(&server.addr, b"BREW /jobs HTTP/1.1\r\nHost: x\r\n\r\n"), 405);

    // 1,000 idle connections, and the server still answers.
    let idle: Vec<TcpStream> = (0..1000).map(|_| TcpStream::connect(&server.addr).unwrap()).collect();
    let started = Instant::now();
    assert_eq!(c.version().unwrap().api, 1);
    assert!(started.elapsed() < Duration::from_secs(5), "answered beside 1,000 idle connections");
    drop(idle);
    assert!(c.jobs().unwrap().is_empty(), "no hostile request made a job");
    assert!(std::fs::read_dir(data.join("jobs")).unwrap().next().is_none(), "nor left files");
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn a_token_guards_every_route() {
    let data = scratch("token");
    let token = data.join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let server = Server::start(&data, &["--token-file", token.to_str().unwrap()]);
    for path in ["/", "/version", "/jobs", "/openapi.json", "/jobs/1/log"] {
        let status = raw_status(&server.addr, format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(status, 401, "{path} without the token");
        let wrong = format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cre\r\n\r\n");
        assert_eq!(raw_status(&server.addr, wrong.as_bytes()), 401, "{path} with a wrong token");
    }
    assert_eq!(api_status(server.client().jobs()), 401);
    assert!(server.client().with_token("s3cret").jobs().unwrap().is_empty());
    drop(server);

    // Anything but loopback needs a token.
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("token"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn the_openapi_description_covers_every_route() {
    let data = scratch("openapi");
    let server = Server::start(&data, &["--workers", "2"]);
    let mut body = String::new();
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    s.read_to_string(&mut body).unwrap();
    let json = &body[body.find("\r\n\r\n").unwrap() + 4..];
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/jobs",
        "/jobs/{id}",
        "/jobs/{id}/cancel",
        "/jobs/{id}/events",
        "/jobs/{id}/experiment.tar.gz",
        "/version",
        "/reset",
    ] {
        assert!(paths.contains_key(p), "{p} described");
    }
    assert!(doc["components"]["schemas"]["JobRequest"]["properties"]["kind"].is_object());
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn the_index_and_a_report_open_in_chromium() {
    let data = scratch("chromium");
    let server = Server::start(&data, &["--workers", "2"]);
    let c = server.client();
    let bug = c.wait(c.submit(&JobRequest::fuzz(example("fuzz-ovs-mesh.toml"))).unwrap().id, WAIT).unwrap();
    let mut broken = JobRequest::fuzz(long_config(10));
    broken.config =
        Some(long_config(10).replace("ovs-testcontroller", "ovs-testcontroller\ncommand = [\"/nonexistent\"]"));
    let failed = c.submit(&broken).map(|j| c.wait(j.id, WAIT).unwrap());
    let chromium = |url: &str, extra: &[&str]| {
        let out = Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,600"])
            .args(extra)
            .arg(url)
            .output()
            .expect("chromium runs (scripts/setup installs it)");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let index = chromium(&format!("http://{}/", server.addr), &["--dump-dom"]);
    assert!(index.contains(&format!("data-job=\"{}\"", bug.id)) && index.contains(">violation<"), "{index}");
    if let Ok(failed) = failed {
        assert!(index.contains(&format!("data-job=\"{}\"", failed.id)));
    }
    let report = chromium(&format!("http://{}/jobs/{}/report.html", server.addr, bug.id), &["--dump-dom"]);
    assert!(report.contains("data-lane=\"s1\"") && report.contains("class=\"violation\""), "the report renders");
    let shot = data.join("index.png");
    chromium(&format!("http://{}/", server.addr), &[&format!("--screenshot={}", shot.display())]);
    assert!(std::fs::metadata(&shot).unwrap().len() > 5_000, "a screenshot with something in it");
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}
