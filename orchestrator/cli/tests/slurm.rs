//! `--executor slurm` on a real one-node Slurm cluster (scripts/slurm-local,
//! from Debian's slurm-wlm and munge): a minimization whose candidates go to
//! warm workers (one job step per task) finds the same MCS as the local
//! executor, also when a worker's step is cancelled or its process killed;
//! a campaign fuzzing its seeds on the workers finds the same bugs; the
//! allocation is given back, even when sts is killed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A one-node cluster for this test binary; stopped when dropped.
struct Cluster {
    dir: PathBuf,
    conf: String,
}

impl Cluster {
    fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("sts-slurm-{}", std::process::id()));
        let out = Command::new(root().join("scripts/slurm-local"))
            .args(["start", dir.to_str().unwrap()])
            // Ports of its own (below the ephemeral range): another cluster may run.
            .env("STS_SLURM_PORT", (20000 + std::process::id() % 10000).to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "scripts/slurm-local start: {}", String::from_utf8_lossy(&out.stderr));
        let conf = String::from_utf8_lossy(&out.stdout).trim().trim_start_matches("export SLURM_CONF=").to_string();
        Cluster { dir, conf }
    }

    fn sts(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_sts")).args(args).env("SLURM_CONF", &self.conf).output().unwrap()
    }

    fn jobs(&self) -> String {
        let out = Command::new("squeue").args(["-h", "-o", "%i %j %T"]).env("SLURM_CONF", &self.conf).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Waits until no job is left (the allocations were given back).
    fn idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.jobs().is_empty() {
            assert!(Instant::now() < deadline, "jobs left: {}", self.jobs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(root().join("scripts/slurm-local")).args(["stop", self.dir.to_str().unwrap()]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sts-slurm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn mcs(dir: &Path) -> Vec<String> {
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("mcs/report.json")).unwrap()).unwrap();
    r["mcs"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect()
}

/// Waits until no salloc or allocation guard of sts's is left.
fn no_salloc_left() {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left =
            Command::new("pgrep").args(["-af", "salloc --no-shell --job-name sts-|exec scancel"]).output().unwrap();
        if left.stdout.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "salloc left behind: {}", String::from_utf8_lossy(&left.stdout));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// This build's `sts worker` processes (not srun's command lines naming them,
/// nor another checkout's workers).
fn worker_pattern() -> String {
    format!("^{} worker$", env!("CARGO_BIN_EXE_sts"))
}

/// Waits until no `sts worker` process is left.
fn no_worker_left() {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = Command::new("pgrep").args(["-af", &worker_pattern()]).output().unwrap();
        if left.stdout.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "workers left behind: {}", String::from_utf8_lossy(&left.stdout));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes a bug-suite case's experiment (its known MCS among `extra` other
/// inputs); returns its directory and the optimal MCS size.
fn suite_case(case: &str, extra: u32, dir: &Path) -> usize {
    let out = Command::new("python3")
        .arg(root().join("tests/suite/make_trace.py"))
        .args([case, &extra.to_string(), "1", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    info["optimal"].as_u64().unwrap() as usize
}

#[test]
fn slurm_runs_give_what_local_runs_give() {
    let cluster = Cluster::start();

    // A bug-suite case minimized twice: locally and as Slurm job steps.
    let local = scratch("local");
    let optimal = suite_case("rare_pair_crash", 8, &local);
    let on_slurm = scratch("on-slurm");
    assert!(Command::new("cp").arg("-r").arg(&local).arg(&on_slurm).status().unwrap().success());
    let min = cluster.sts(&["minimize", local.to_str().unwrap(), "--jobs", "2", "--final-replays", "2"]);
    assert!(min.status.success(), "{}", String::from_utf8_lossy(&min.stderr));
    let args =
        ["minimize", on_slurm.to_str().unwrap(), "--executor", "slurm", "--max-tasks", "2", "--final-replays", "2"];
    let min = cluster.sts(&args);
    let said = String::from_utf8_lossy(&min.stderr);
    assert!(min.status.success(), "{said}");
    assert!(said.contains("Slurm allocation"), "{said}");
    assert_eq!(mcs(&on_slurm), mcs(&local), "the same MCS on Slurm as here");
    assert_eq!(mcs(&on_slurm).len(), optimal, "and the optimal one");
    cluster.idle();
    no_salloc_left();

    // A worker lost mid-minimization, its step cancelled (scancel) or its
    // process killed (SIGKILL): another takes its place, the work goes on,
    // the MCS is the same, and nothing is left behind.
    let big = scratch("big");
    suite_case("rare_pair_crash", 200, &big);
    let mut first_mcs = Vec::new();
    for (attempt, how) in ["scancel", "SIGKILL"].into_iter().enumerate() {
        let cut = scratch(&format!("cut{attempt}"));
        assert!(Command::new("cp").arg("-r").arg(&big).arg(&cut).status().unwrap().success());
        let child = Command::new(env!("CARGO_BIN_EXE_sts"))
            .args([
                "minimize",
                cut.to_str().unwrap(),
                "--executor",
                "slurm",
                "--max-tasks",
                "2",
                "--final-replays",
                "1",
            ])
            .env("SLURM_CONF", &cluster.conf)
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Once the workers have been busy a while (past their warm-up).
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cut.join("mcs/state.json").exists() {
            assert!(Instant::now() < deadline, "the minimization never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        let lost = match how {
            "scancel" => {
                let steps = Command::new("squeue")
                    .args(["-s", "-h", "-o", "%i %j"])
                    .env("SLURM_CONF", &cluster.conf)
                    .output()
                    .unwrap();
                let steps = String::from_utf8_lossy(&steps.stdout).to_string();
                let step = steps.lines().find(|l| l.ends_with(" sts")).and_then(|l| l.split_whitespace().next());
                let step = step.unwrap_or_else(|| panic!("no worker step: {steps}")).to_string();
                assert!(Command::new("scancel")
                    .arg(&step)
                    .env("SLURM_CONF", &cluster.conf)
                    .status()
                    .unwrap()
                    .success());
                step
            }
            _ => {
                let out = Command::new("pgrep").args(["-n", "-f", &worker_pattern()]).output().unwrap();
                let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
                assert!(!pid.is_empty(), "no worker process");
                assert!(Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
                pid
            }
        };
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "worker {lost} lost ({how}): {said}");
        assert!(said.contains("starting another, the work goes on"), "{how} of {lost}: {said}");
        assert!(said.contains("1 worker lost and replaced"), "{said}");
        if attempt == 0 {
            let again = scratch("big-local");
            assert!(Command::new("cp").arg("-r").arg(&big).arg(&again).status().unwrap().success());
            let min = cluster.sts(&["minimize", again.to_str().unwrap(), "--jobs", "2", "--final-replays", "1"]);
            assert!(min.status.success(), "{}", String::from_utf8_lossy(&min.stderr));
            assert_eq!(mcs(&cut), mcs(&again), "the same MCS all the same");
            let _ = std::fs::remove_dir_all(again);
            first_mcs = mcs(&cut);
        } else {
            assert_eq!(mcs(&cut), first_mcs, "the same MCS all the same");
        }
        cluster.idle();
        no_worker_left();
    }

    // A campaign: seeds fuzzed on the warm workers, bugs minimized on them.
    let camp_local = scratch("camp-local");
    let camp_slurm = scratch("camp-slurm");
    let config = root().join("examples/fuzz-osken13-migration.toml");
    let base = ["campaign", "--config", config.to_str().unwrap(), "--seeds", "1..4", "--final-replays", "1", "--out"];
    let a = cluster.sts(&[&base[..], &[camp_local.to_str().unwrap(), "--jobs", "2"]].concat());
    let b =
        cluster.sts(&[&base[..], &[camp_slurm.to_str().unwrap(), "--executor", "slurm", "--max-tasks", "2"]].concat());
    assert_eq!(a.status.code(), Some(1), "{}", String::from_utf8_lossy(&a.stderr));
    assert_eq!(b.status.code(), Some(1), "{}", String::from_utf8_lossy(&b.stderr));
    let summary = |d: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap()
    };
    let bugs = |v: &serde_json::Value| -> Vec<(String, serde_json::Value)> {
        v["bugs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["identity"].as_str().unwrap().to_string(), b["seeds"].clone()))
            .collect()
    };
    let (sa, sb) = (summary(&camp_local), summary(&camp_slurm));
    assert!(!bugs(&sb).is_empty());
    assert_eq!(bugs(&sb), bugs(&sa), "the same bugs, found by the same seeds");
    for bug in sb["bugs"].as_array().unwrap() {
        assert!(bug["mcs"]["mcs_inputs"].as_u64().is_some_and(|n| n >= 1), "minimized: {bug}");
    }
    assert!(
        sb["workers"]["answered"].as_u64().is_some_and(|n| n >= 4),
        "every seed went to a worker: {}",
        sb["workers"]
    );
    assert!(sa.get("workers").is_none(), "no workers here");
    cluster.idle();
    no_salloc_left();

    // sts killed mid-minimization: the allocation is given back all the same.
    let killed = scratch("killed");
    assert!(Command::new("cp").arg("-r").arg(&local).arg(&killed).status().unwrap().success());
    let _ = std::fs::remove_dir_all(killed.join("mcs"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["minimize", killed.to_str().unwrap(), "--executor", "slurm", "--max-tasks", "2"])
        .env("SLURM_CONF", &cluster.conf)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.jobs().is_empty() {
        assert!(Instant::now() < deadline, "no allocation was made");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    cluster.idle();
    no_salloc_left();
    no_worker_left();

    // sts serve handing its jobs to Slurm: they run as Slurm jobs, a cancel cancels one.
    serve_on_slurm(&cluster);

    // Without Slurm: a clear error, exit 3.
    let out = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["minimize", killed.to_str().unwrap(), "--executor", "slurm"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot run salloc"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for d in [local, on_slurm, camp_local, camp_slurm, killed, big] {
        let _ = std::fs::remove_dir_all(d);
    }
    for attempt in 0..2 {
        let _ = std::fs::remove_dir_all(scratch(&format!("cut{attempt}")));
    }
}

fn serve_on_slurm(cluster: &Cluster) {
    use sts_client::{Client, JobRequest, Outcome, State};
    let data = scratch("serve");
    let mut server = Command::new(env!("CARGO_BIN_EXE_sts"))
        .args(["serve", "--listen", "127.0.0.1:0", "--executor", "slurm", "--data"])
        .arg(&data)
        .env("SLURM_CONF", &cluster.conf)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(server.stderr.take().unwrap());
    let mut line = String::new();
    let url = loop {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0, "sts serve ended");
        if let Some(rest) = line.split("listening on ").nth(1) {
            assert!(line.contains("handing jobs to Slurm"), "{line}");
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    let c = Client::new(url).with_token_file(data.join("token")).unwrap();
    let mesh = std::fs::read_to_string(root().join("examples/fuzz-ovs-mesh.toml")).unwrap();
    let job = c.wait(c.submit(&JobRequest::fuzz(mesh)).unwrap().id, Duration::from_secs(120)).unwrap();
    assert_eq!((job.state, job.outcome), (State::Succeeded, Some(Outcome::Violation)), "{}", c.log(job.id).unwrap());
    let long = "[network]\ntopology = \"linear\"\nsize = 3\n\n[[controllers]]\nkind = \"ovs-testcontroller\"\n\n\
                [fuzz]\nsteps = 1000000\n\n[fuzz.rates]\ntraffic = 0.5\nlink_failure = 0.0\nlink_recovery = 0.0\nhost_migration = 0.0\n";
    let long = c.submit(&JobRequest::fuzz(long)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.jobs().contains(&format!("sts-job-{}", long.id)) || c.job(long.id).unwrap().progress.is_none() {
        assert!(Instant::now() < deadline, "the job never ran on Slurm: {}", cluster.jobs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancelled = c.cancel(long.id).unwrap();
    assert_eq!(cancelled.state, State::Cancelled, "{cancelled:?}");
    cluster.idle();
    // No controller (nor sts) is left on the node: nothing works in the job's directory.
    let job_dir = data.join("jobs").join(long.id.to_string()).canonicalize().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&job_dir)))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left by the cancelled job: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&data);
}
