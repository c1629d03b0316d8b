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
    /// The token clients send (the data directory's, or --token-file's).
    token: String,
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
        let token_file = extra
            .iter()
            .position(|a| *a == "--token-file")
            .map_or_else(|| data.join("token"), |i| PathBuf::from(extra[i + 1]));
        let token = std::fs::read_to_string(token_file).unwrap().trim().to_string();
        Server { child, addr, token, stderr }
    }

    fn client(&self) -> Client {
        Client::new(format!("http://{}", self.addr)).with_token(&self.token)
    }

    /// A raw request written with `Host: x` as one this server answers:
    /// its own address as Host, and the token.
    fn authed(&self, request: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(request);
        text.replacen("Host: x\r\n", &format!("Host: {}\r\nAuthorization: Bearer {}\r\n", self.addr, self.token), 1)
            .into_bytes()
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
    // The log is text: the engine's progress goes to /events and `progress`.
    assert!(log.contains("$ sts --progress json fuzz") && !log.contains("{\"progress\":"), "{log}");

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
    assert!(junit.contains("<testsuite name=\"sts minimize\"") && junit.contains("<failure"), "{junit}");
    let pcap = c.artifact(min.id, "trace.pcapng").unwrap();
    assert_eq!(&pcap[..4], &[0x0a, 0x0d, 0x0d, 0x0a], "a pcapng file (its section header block)");
    assert_eq!(c.artifact(min.id, "trace.pcap").unwrap(), pcap, "the old name serves the same capture");
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
        raw_status(&server.addr, &server.authed(req.as_bytes()))
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
        &server.authed(
            b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{\"kind\":",
        ),
    );
    assert_eq!(huge, 413);
    // ... and a chunked one as it comes.
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(&server.authed(
        b"POST /jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    ))
    .unwrap();
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
    assert_eq!(raw_status(&server.addr, &server.authed(b"GET /jobs/abc HTTP/1.1\r\nHost: x\r\n\r\n")), 400, "a bad id");
    assert_eq!(raw_status(&server.addr, &server.authed(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")), 404);
    assert_eq!(raw_status(&server.addr, &server.authed(b"GET /jobs?state=weird HTTP/1.1\r\nHost: x\r\n\r\n")), 400);
    assert_eq!(raw_status(&server.addr, &server.authed(b"DELETE /jobs/1 HTTP/1.1\r\nHost: x\r\n\r\n")), 404);
    assert_eq!(raw_status(&server.addr, &server.authed(b"BREW /jobs HTTP/1.1\r\nHost: x\r\n\r\n")), 405);

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

/// A raw request's whole answer (head and body), read to the connection's end.
fn raw_answer(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn nothing_gets_in_without_the_token_from_this_host() {
    let data = scratch("token");
    let token = data.join("given-token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let server = Server::start(&data, &["--token-file", token.to_str().unwrap()]);
    let host = &server.addr;
    let get = |path: &str, extra: &str| {
        raw_status(host, format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n").as_bytes())
    };
    for path in ["/", "/version", "/jobs", "/openapi.json", "/jobs/1/log", "/proxies"] {
        assert_eq!(get(path, ""), 401, "{path} without the token");
        assert_eq!(get(path, "Authorization: Bearer s3cre\r\n"), 401, "{path} with a wrong token");
    }
    assert_eq!(get("/version", "Authorization: bearer s3cret\r\n"), 200, "the scheme is case-insensitive");
    assert_eq!(api_status(Client::new(format!("http://{host}")).jobs()), 401);
    assert!(server.client().jobs().unwrap().is_empty());
    // A name that is not the server's (DNS rebinding), with the token: refused.
    for foreign in ["evil.example", "evil.example:80", "localhost.evil.example"] {
        let req = format!("GET /jobs HTTP/1.1\r\nHost: {foreign}\r\nAuthorization: Bearer s3cret\r\n\r\n");
        assert_eq!(raw_status(host, req.as_bytes()), 400, "Host {foreign}");
    }
    // A browser's request from another origin, even with the token: refused.
    let from_page = |method: &str, path: &str, origin: &str| {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nAuthorization: Bearer s3cret\r\n\
             Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        raw_status(host, req.as_bytes())
    };
    for origin in ["http://evil.example", "null", &format!("http://{host}")] {
        assert_eq!(from_page("POST", "/jobs", origin), 403, "{origin}");
        assert_eq!(from_page("OPTIONS", "/jobs", origin), 403, "{origin}: a preflight");
    }
    // Job submissions come as JSON or multipart: a "simple" text/plain POST is refused.
    let job = serde_json::to_string(&JobRequest::fuzz(long_config(10))).unwrap();
    let post = |path: &str, ctype: &str, body: &str, auth: &str| {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: {ctype}\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        raw_status(host, req.as_bytes())
    };
    let auth = "Authorization: Bearer s3cret\r\n";
    assert_eq!(post("/jobs", "text/plain", &job, ""), 401);
    assert_eq!(post("/jobs", "text/plain", &job, auth), 415);
    assert_eq!(post("/jobs", "application/x-www-form-urlencoded", &job, auth), 415);
    assert_eq!(post("/reset", "application/json", "{}", auth), 400, "a reset needs its confirmation");
    assert_eq!(post("/reset", "application/json", "{\"confirm\": \"yes\"}", auth), 400);
    assert_eq!(post("/reset", "text/plain", "{\"confirm\": \"delete every job\"}", auth), 415);
    // The browser's login: `?token=` sets a cookie that reads, and never writes.
    let login = raw_answer(
        host,
        format!("GET /?token=s3cret HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert!(
        login.starts_with("HTTP/1.1 303") && login.contains("sts_token=s3cret") && login.contains("SameSite=Strict"),
        "{login}"
    );
    assert_eq!(raw_status(host, format!("GET /?token=wrong HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()), 401);
    assert_eq!(get("/", "Cookie: sts_token=s3cret\r\n"), 200);
    assert_eq!(post("/jobs", "application/json", &job, "Cookie: sts_token=s3cret\r\n"), 401);
    assert!(server.client().jobs().unwrap().is_empty(), "nothing above made a job");
    drop(server);

    // Without --token-file: a token made at the first start, owner-only, printed once.
    let fresh = scratch("token-made");
    let first = Server::start(&fresh, &[]);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(fresh.join("token")).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(first.stderr.lock().unwrap().contains("a new token"), "{}", first.stderr.lock().unwrap());
    assert!(first.client().jobs().unwrap().is_empty());
    assert_eq!(api_status(Client::new(format!("http://{}", first.addr)).jobs()), 401);
    // One server per data directory: a second refuses, naming the first.
    let second = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&fresh)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{said}");
    assert!(said.contains("in use") && said.contains(&format!("pid {}", first.child.id())), "{said}");
    assert!(first.client().jobs().is_ok(), "the first goes on");
    drop(first);
    let again = Server::start(&fresh, &[]);
    assert!(!again.stderr.lock().unwrap().contains("a new token"), "the token is kept");
    assert!(again.client().jobs().unwrap().is_empty());
    drop(again);

    // Token files that are no token: exit 2, at once.
    for bad in ["/dev/zero", "/etc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_sts"))
            .args(["serve", "--listen", "127.0.0.1:0", "--token-file", bad, "--data"])
            .arg(&data)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // --data naming a file is bad input.
    let file = data.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&fresh);
}

/// Serves `page` to every request on a port of its own (another origin).
fn serve_page(page: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = write!(
                conn,
                "HTTP/1.0 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    addr
}

fn chromium(url: &str, extra: &[&str]) -> String {
    let profile = std::env::temp_dir().join(format!("sts-chromium-{}-{}", std::process::id(), url.len()));
    let out = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,600"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium runs (scripts/setup installs it)");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_page_on_another_origin_can_neither_run_nor_read_nor_reset() {
    let data = scratch("csrf");
    let server = Server::start(&data, &["--workers", "1"]);
    let c = server.client();
    let before = c.wait(c.submit(&JobRequest::fuzz(long_config(5))).unwrap().id, WAIT).unwrap();
    let marker = data.join("pwned");
    // A controller given as a command: it runs `touch MARKER` first.
    let config = long_config(5).replace(
        "kind = \"ovs-testcontroller\"",
        &format!(
            "kind = \"command\"\ncommand = [\"sh\", \"-c\", \"touch {} && exec ovs-testcontroller ptcp:{{port}}:127.0.0.1\"]",
            marker.display()
        ),
    );
    let job = serde_json::to_string(&JobRequest::fuzz(config.clone())).unwrap();
    let config_with_command = config;
    let target = format!("http://{}", server.addr);
    // The page: the user has logged in with the token in this browser (an
    // iframe does it), and the page even knows the token; then it tries
    // every way a page has: no-cors fetches (text/plain, JSON), a CORS fetch
    // with the token (a preflight), self-submitting forms (multipart and
    // text/plain), a reset, and reading the job list.
    let page = format!(
        r#"<!doctype html><html><head><title>start</title></head><body>
<iframe name="login" src="{target}/?token={token}"></iframe><iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<form id="multi" method="POST" action="{target}/jobs" enctype="multipart/form-data" target="sink1"><input type="hidden" name="job"></form>
<form id="plain" method="POST" action="{target}/jobs" enctype="text/plain" target="sink2"><input type="hidden" name="job"></form>
<pre id="log"></pre>
<script>
const job = {job_js};
const log = (s) => {{ document.getElementById('log').textContent += s + " | "; }};
setTimeout(async () => {{
  for (const f of ['multi', 'plain']) {{ const el = document.getElementById(f); el.elements[0].value = job; el.submit(); }}
  const tries = [
    ['no-cors multipart', () => {{ const f = new FormData(); f.append('job', job); return fetch("{target}/jobs", {{method: 'POST', mode: 'no-cors', body: f}}); }}],
    ['no-cors text', () => fetch("{target}/jobs", {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body: job}})],
    ['no-cors reset', () => fetch("{target}/reset", {{method: 'POST', mode: 'no-cors', body: '{{"confirm": "delete every job"}}'}})],
    ['cors with token', () => fetch("{target}/jobs", {{method: 'POST', headers: {{'Content-Type': 'application/json', 'Authorization': 'Bearer {token}'}}, body: job}})],
    ['cors reset', () => fetch("{target}/reset", {{method: 'POST', headers: {{'Content-Type': 'application/json', 'Authorization': 'Bearer {token}'}}, body: '{{"confirm": "delete every job"}}'}})],
    ['read jobs', () => fetch("{target}/jobs", {{credentials: 'include'}}).then(r => r.text()).then(t => log('READ ' + t))],
  ];
  for (const [name, t] of tries) {{ try {{ await t(); log('sent ' + name); }} catch (e) {{ log('blocked ' + name); }} }}
  document.title = 'done';
}}, 1500);
</script></body></html>"#,
        token = server.token,
        job_js = serde_json::to_string(&job).unwrap(),
    );
    let page_addr = serve_page(page);
    let dom = chromium(&format!("http://{page_addr}/"), &["--virtual-time-budget=8000", "--dump-dom"]);
    assert!(dom.contains("<title>done</title>"), "the page ran to its end: {dom}");
    let log = dom.split("<pre id=\"log\">").nth(1).and_then(|r| r.split("</pre>").next()).unwrap_or("");
    assert!(!log.contains("READ"), "the page read an answer: {log}");
    assert!(log.contains("blocked cors with token") && log.contains("blocked read jobs"), "{log}");
    std::thread::sleep(Duration::from_millis(500));
    let jobs = c.jobs().unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![before.id], "no job made, none reset");
    assert!(!marker.exists(), "no command ran");
    // The same job with the token, from a client: the command runs (so the
    // page's job was a real one, kept out by the door alone).
    let own = c.wait(c.submit(&JobRequest::fuzz(config_with_command)).unwrap().id, WAIT).unwrap();
    assert!(own.state.is_final());
    assert!(marker.exists(), "the job's command ran for the client with the token: {}", c.log(own.id).unwrap());
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn idle_and_slow_connections_do_not_keep_a_client_out() {
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard.max(soft), hard);
    let data = scratch("slow");
    let server = Server::start(&data, &["--workers", "1"]);
    let c = server.client();
    // 1,000 that never send a byte, 1,000 that send half a request head.
    let mut held: Vec<TcpStream> = Vec::new();
    for i in 0..2000 {
        let Ok(mut s) = TcpStream::connect(&server.addr) else { continue };
        if i % 2 == 1 {
            let _ = s.write_all(b"GET /jobs HTTP/1.1\r\nHost: ");
        }
        held.push(s);
        if i % 100 == 99 {
            assert_eq!(c.version().unwrap().api, 1, "answered beside {} held connections", held.len());
        }
    }
    assert!(held.len() >= 1900, "the test opened its connections ({})", held.len());
    let started = Instant::now();
    for _ in 0..20 {
        assert!(c.jobs().unwrap().is_empty());
    }
    assert!(started.elapsed() < Duration::from_secs(5), "20 answers beside 2,000 held connections");
    // The server kept only a bounded number of them open.
    let pid = server.child.id();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    assert!(fds < 1000, "the server holds {fds} descriptors");
    drop(held);
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_mesh_bomb_is_refused_at_once_and_costs_nothing() {
    let data = scratch("bomb");
    let server = Server::start(&data, &["--workers", "1"]);
    let c = server.client();
    assert_eq!(c.version().unwrap().api, 1);
    let rss_before = rss_kib(server.child.id());
    for (size, version) in [(20_000, "1.0"), (100_000, "1.3"), (2_000, "1.0")] {
        let config = format!(
            "[network]\ntopology = \"mesh\"\nsize = {size}\nopenflow = \"{version}\"\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n"
        );
        let started = Instant::now();
        let status = api_status(c.submit(&JobRequest::fuzz(config.clone())));
        assert_eq!(status, 400, "mesh {size}");
        assert!(started.elapsed() < Duration::from_secs(1), "mesh {size} refused in {:?}", started.elapsed());
        // The command line refuses it the same way, naming the field.
        let file = data.join(format!("mesh-{size}.toml"));
        std::fs::write(&file, &config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_sts"))
            .args(["fuzz", "--config"])
            .arg(&file)
            .arg("--out")
            .arg(data.join(format!("out-{size}")))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains("network.size") && said.contains("links"), "{said}");
    }
    let rss_after = rss_kib(server.child.id());
    assert!(rss_after < rss_before + 20 * 1024, "RSS {rss_before} KiB -> {rss_after} KiB");
    assert!(c.jobs().unwrap().is_empty());
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}

#[test]
fn the_openapi_description_covers_every_route() {
    let data = scratch("openapi");
    let server = Server::start(&data, &["--workers", "2"]);
    let mut body = String::new();
    let mut s = TcpStream::connect(&server.addr).unwrap();
    s.write_all(&server.authed(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).unwrap();
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
    // A person opens the index once with the token; the cookie lets the browser read.
    let index = chromium(&format!("http://{}/?token={}", server.addr, server.token), &["--dump-dom"]);
    assert!(index.contains(&format!("data-job=\"{}\"", bug.id)) && index.contains(">bug found<"), "{index}");
    if let Ok(failed) = failed {
        assert!(index.contains(&format!("data-job=\"{}\"", failed.id)));
    }
    // Each verdict in its kind's words: exit 0 of a minimization or of a
    // replay under `expect` is a bug, not "nothing found".
    let mut min = JobRequest::minimize_of(bug.id);
    min.final_replays = Some(2);
    let min = c.wait(c.submit(&min).unwrap().id, WAIT).unwrap();
    let mut replay = JobRequest::replay_of(bug.id);
    replay.expect = Some(sts_client::Expect::Reproduce);
    let replay = c.wait(c.submit(&replay).unwrap().id, WAIT).unwrap();
    assert_eq!((min.exit_code, replay.exit_code), (Some(0), Some(0)), "{min:?} {replay:?}");
    let index = chromium(&format!("http://{}/?token={}", server.addr, server.token), &["--dump-dom"]);
    let row = |id: i64| {
        let start = index.find(&format!("data-job=\"{id}\"")).unwrap_or_else(|| panic!("job {id} in {index}"));
        let row = &index[index[..start].rfind("<tr").unwrap()..];
        row[..row.find("</tr>").unwrap()].to_string()
    };
    for (id, class, verdict) in
        [(bug.id, "bug", "bug found"), (min.id, "bug", "bug minimized"), (replay.id, "ok", "reproduced, as expected")]
    {
        let r = row(id);
        assert!(r.contains(&format!("class=\"{class}\"")) && r.contains(&format!(">{verdict}<")), "{r}");
    }
    // A page per job, and its files to browse.
    let page =
        chromium(&format!("http://{}/jobs/{}/page?token={}", server.addr, min.id, server.token), &["--dump-dom"]);
    assert!(page.contains(">bug minimized<") && page.contains(&format!("/jobs/{}/files/", min.id)), "{page}");
    let files =
        chromium(&format!("http://{}/jobs/{}/files/?token={}", server.addr, min.id, server.token), &["--dump-dom"]);
    assert!(files.contains(&format!("href=\"/jobs/{}/files/mcs/\"", min.id)), "{files}");
    let get = |path: &str| {
        raw_answer(
            &server.addr,
            &server.authed(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()),
        )
    };
    let md = get(&format!("/jobs/{}/files/mcs/report.md", min.id));
    assert!(md.starts_with("HTTP/1.1 200") && md.contains("text/plain"), "{md}");
    let html = get(&format!("/jobs/{}/files/report/index.html", min.id)).to_ascii_lowercase();
    assert!(
        html.starts_with("http/1.1 200") && html.contains("content-security-policy: sandbox allow-scripts"),
        "{html}"
    );
    std::os::unix::fs::symlink("/etc", data.join(format!("jobs/{}/run/etc", min.id))).unwrap();
    for hostile in
        ["files/../../../../etc/passwd", "files/..%2F..%2F..%2F..%2Fetc%2Fpasswd", "files/etc/passwd", "files/nothing"]
    {
        let a = get(&format!("/jobs/{}/{hostile}", min.id));
        assert!(a.starts_with("HTTP/1.1 4") && !a.contains("root:"), "{hostile}: {a}");
    }
    let report = chromium(
        &format!("http://{}/jobs/{}/report.html?token={}", server.addr, bug.id, server.token),
        &["--dump-dom"],
    );
    assert!(report.contains("data-lane=\"s1\"") && report.contains("class=\"violation\""), "the report renders");
    let shot = data.join("index.png");
    chromium(
        &format!("http://{}/?token={}", server.addr, server.token),
        &[&format!("--screenshot={}", shot.display())],
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 5_000, "a screenshot with something in it");
    drop(server);
    let _ = std::fs::remove_dir_all(&data);
}
