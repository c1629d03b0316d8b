//! `sts-client`: the wire types of `sts serve`'s HTTP API and a small
//! blocking client for it (what the server's own tests use).
//!
//! ```no_run
//! use sts_client::{Client, JobRequest, Kind};
//! // The server's token is in its data directory (`sts serve --data sts-data`).
//! let client = Client::new("http://127.0.0.1:7878").with_token_file("sts-data/token").unwrap();
//! let config = std::fs::read_to_string("examples/fuzz-ovs-mesh.toml").unwrap();
//! let job = client.submit(&JobRequest::fuzz(config)).unwrap();
//! let done = client.wait(job.id, std::time::Duration::from_secs(600)).unwrap();
//! println!("{:?} {:?}", done.state, done.outcome);
//! ```
//!
//! The API itself is described in `docs/api.md` and, generated from these
//! types and the server's routes, at `/openapi.json`.

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a job does: the `sts` subcommand it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `sts fuzz`: needs a config.
    Fuzz,
    /// `sts replay`: needs an experiment (a finished job's, one under the
    /// data directory, or an uploaded one).
    Replay,
    /// `sts minimize`: needs an experiment, as replay.
    Minimize,
    /// `sts campaign`: a config fuzzed under many `seeds`, each distinct bug
    /// minimized; needs a config, as fuzz.
    Campaign,
}

impl Kind {
    /// The subcommand's name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Fuzz => "fuzz",
            Kind::Replay => "replay",
            Kind::Minimize => "minimize",
            Kind::Campaign => "campaign",
        }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for a worker.
    Queued,
    /// A worker runs it.
    Running,
    /// It ran to its end: see `outcome` for what it found.
    Succeeded,
    /// It could not run to its end: bad input, a broken environment, or the
    /// job's process was killed.
    Failed,
    /// Cancelled before it ended.
    Cancelled,
}

impl State {
    /// True once the job will not change again.
    pub fn is_final(self) -> bool {
        matches!(self, State::Succeeded | State::Failed | State::Cancelled)
    }

    /// The name used in the API and the store.
    pub fn name(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Running => "running",
            State::Succeeded => "succeeded",
            State::Failed => "failed",
            State::Cancelled => "cancelled",
        }
    }

    /// The state named `s`.
    pub fn from_name(s: &str) -> Option<State> {
        [State::Queued, State::Running, State::Succeeded, State::Failed, State::Cancelled]
            .into_iter()
            .find(|st| st.name() == s)
    }
}

/// What a finished job came to: the `sts` exit code, named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Exit 0: nothing found (fuzz), the bug did not reproduce (replay), or
    /// an expectation held.
    Ok,
    /// Exit 1: a violation found, or reproduced, or an expectation failed.
    Violation,
    /// Exit 2: the config, trace or options are bad; the log says where.
    BadInput,
    /// Exit 3: the environment failed (a controller did not start ...).
    Environment,
    /// Exit 4 (fuzz): a violation present before the first input.
    PresentFromStart,
    /// Exit 5 (minimize): the original trace does not reproduce its
    /// violation; nothing to minimize.
    DoesNotReproduce,
    /// The job's process was killed by a signal it was not sent by a cancel.
    Killed,
    /// Cancelled.
    Cancelled,
}

impl Outcome {
    /// The outcome of an `sts` exit code.
    pub fn of_exit_code(code: i32) -> Outcome {
        match code {
            0 => Outcome::Ok,
            1 => Outcome::Violation,
            2 => Outcome::BadInput,
            4 => Outcome::PresentFromStart,
            5 => Outcome::DoesNotReproduce,
            _ => Outcome::Environment,
        }
    }

    /// The state a job with this outcome ends in.
    pub fn state(self) -> State {
        match self {
            Outcome::Ok | Outcome::Violation | Outcome::PresentFromStart => State::Succeeded,
            Outcome::BadInput | Outcome::Environment | Outcome::Killed | Outcome::DoesNotReproduce => State::Failed,
            Outcome::Cancelled => State::Cancelled,
        }
    }
}

/// What `replay` should expect, for CI (`sts replay --expect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Reproduce,
    Vanish,
}

/// When a replay's violation counts as the original bug (`--same`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Same {
    Kind,
    Culprit,
    Switch,
    Victim,
    Exact,
}

/// PEEK mode of a minimization (`--peek`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Peek {
    Off,
    On,
    Prefix,
    Checkpoints,
}

/// A job to run: the body of `POST /jobs` (or its `job` part, beside a
/// `files` tar, in a multipart upload). Unknown fields are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// What to run.
    pub kind: Option<Kind>,
    /// fuzz, campaign: the config, as TOML text (written as `config.toml` beside `files`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// fuzz, campaign: the config's path among the uploaded files (instead of `config`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// Text files placed beside the config (relative path to contents): the
    /// topology files and controller apps a config names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// replay, minimize: the experiment a finished job wrote (copied: the
    /// job's own directory is left alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_job: Option<i64>,
    /// replay, minimize: an experiment directory, relative to the data
    /// directory's `experiments/`, or to the upload when files are uploaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    /// campaign: the seeds to fuzz, `A..B` (inclusive) or one seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<String>,
    /// campaign: fuzz runs at once inside the job (`--jobs`, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u32>,
    /// replay: number of replays (`--repeat`, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// replay: what CI expects (`--expect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expect>,
    /// replay, minimize, campaign: bug identity level (`--same`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same: Option<Same>,
    /// minimize, campaign: replays per candidate (`--replays`, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u32>,
    /// minimize, campaign: replays of the final sequence (`--final-replays`, default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_replays: Option<u32>,
    /// minimize, campaign: stop (each minimization) after this many seconds with the best so far (`--budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<u64>,
    /// minimize: PEEK mode (`--peek`, default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peek: Option<Peek>,
}

impl PolicyRule {
    /// A rule applying `action` to every message of type `msg_type`.
    pub fn on_type(action: RuleAction, msg_type: &str) -> PolicyRule {
        PolicyRule {
            name: None,
            action,
            msg_type: Some(msg_type.into()),
            switch: None,
            datapath_id: None,
            direction: None,
            ms: None,
            jitter_ms: None,
            rate: None,
            probability: None,
            enabled: None,
        }
    }

    /// A bandwidth rule: every message through a pipe of `kb_per_s` KB/s.
    pub fn bandwidth(kb_per_s: u64) -> PolicyRule {
        PolicyRule { msg_type: None, rate: Some(kb_per_s), ..PolicyRule::on_type(RuleAction::Bandwidth, "hello") }
    }

    /// This rule, named (for `/proxies/NAME/rules/RULE`).
    pub fn named(self, name: &str) -> PolicyRule {
        PolicyRule { name: Some(name.into()), ..self }
    }

    /// Whether the rule selects anything (not switched off).
    pub fn is_enabled(&self) -> bool {
        self.enabled != Some(false)
    }
}

impl JobRequest {
    /// A fuzz job of a config given as text.
    pub fn fuzz(config: impl Into<String>) -> JobRequest {
        JobRequest { kind: Some(Kind::Fuzz), config: Some(config.into()), ..JobRequest::default() }
    }

    /// A campaign of a config given as text over `seeds` (`A..B`).
    pub fn campaign(config: impl Into<String>, seeds: impl Into<String>) -> JobRequest {
        JobRequest {
            kind: Some(Kind::Campaign),
            config: Some(config.into()),
            seeds: Some(seeds.into()),
            ..JobRequest::default()
        }
    }

    /// A replay of the experiment job `id` wrote.
    pub fn replay_of(id: i64) -> JobRequest {
        JobRequest { kind: Some(Kind::Replay), from_job: Some(id), ..JobRequest::default() }
    }

    /// A minimization of the experiment job `id` wrote.
    pub fn minimize_of(id: i64) -> JobRequest {
        JobRequest { kind: Some(Kind::Minimize), from_job: Some(id), ..JobRequest::default() }
    }
}

/// A job, as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Job {
    pub id: i64,
    pub kind: Kind,
    pub state: State,
    /// Set once the job is final.
    pub outcome: Option<Outcome>,
    /// The `sts` exit code, when the process exited (not when killed).
    pub exit_code: Option<i32>,
    /// Why the job failed or how it was stopped, in a line.
    pub error: Option<String>,
    /// What a finished job found, in a line: the violation, the replays
    /// that reproduced it, the size of the minimal causal sequence.
    pub summary: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// Times a worker started it (more than one after a server restart).
    pub attempts: u32,
    /// The latest progress the job's engine reported (`sts --progress json`).
    #[schema(value_type = Option<Object>)]
    pub progress: Option<serde_json::Value>,
    /// The request it was submitted with.
    pub request: JobRequest,
}

/// What a job came to, in its kind's own words: the exit code alone does not
/// say it (a minimization that ends with exit 0 found a bug; a replay's exit
/// 0 means "vanished" or, under `expect`, "as expected").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Waiting for a worker.
    Queued,
    /// A worker runs it.
    Running,
    /// A fuzz run or campaign that found no violation.
    NothingFound,
    /// A fuzz run or campaign that found a violation (a bug).
    BugFound,
    /// A fuzz run whose network was broken before its first input.
    BrokenFromStart,
    /// A replay that showed the bug again (`expect` not given).
    Reproduced,
    /// A replay that did not show the bug (`expect` not given).
    Vanished,
    /// A replay whose `expect` held: `reproduced` says which way.
    AsExpected { reproduced: bool },
    /// A replay whose `expect` failed: `reproduced` says what happened.
    NotAsExpected { reproduced: bool },
    /// A minimization that ran to its end (its summary gives the sequence).
    Minimized,
    /// The job could not run: bad input, environment, killed.
    Failed(Outcome),
    /// Cancelled through the API.
    Cancelled,
}

/// How a verdict reads at a glance (the index's colours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Nothing wrong found, or a CI expectation held.
    Good,
    /// A bug: found, reproduced, minimized, or an expectation failed.
    Bug,
    /// The job itself failed.
    Error,
    /// Queued, running or cancelled.
    Neutral,
}

impl Verdict {
    /// Its words, as the index shows them.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Queued => "queued",
            Verdict::Running => "running",
            Verdict::NothingFound => "nothing found",
            Verdict::BugFound => "bug found",
            Verdict::BrokenFromStart => "violation from the start",
            Verdict::Reproduced => "reproduced",
            Verdict::Vanished => "did not reproduce",
            Verdict::AsExpected { reproduced: true } => "reproduced, as expected",
            Verdict::AsExpected { reproduced: false } => "vanished, as expected",
            Verdict::NotAsExpected { reproduced: true } => "reproduced, expected to vanish",
            Verdict::NotAsExpected { reproduced: false } => "vanished, expected to reproduce",
            Verdict::Minimized => "bug minimized",
            Verdict::Failed(Outcome::BadInput) => "bad input",
            Verdict::Failed(Outcome::Environment) => "environment failed",
            Verdict::Failed(Outcome::DoesNotReproduce) => "original does not reproduce",
            Verdict::Failed(_) => "killed",
            Verdict::Cancelled => "cancelled",
        }
    }

    /// How it reads at a glance.
    pub fn tone(self) -> Tone {
        match self {
            Verdict::NothingFound | Verdict::Vanished | Verdict::AsExpected { .. } => Tone::Good,
            Verdict::BugFound
            | Verdict::BrokenFromStart
            | Verdict::Reproduced
            | Verdict::NotAsExpected { .. }
            | Verdict::Minimized => Tone::Bug,
            Verdict::Failed(_) => Tone::Error,
            Verdict::Queued | Verdict::Running | Verdict::Cancelled => Tone::Neutral,
        }
    }
}

impl Job {
    /// What the job came to, by its kind and request (see [`Verdict`]).
    pub fn verdict(&self) -> Verdict {
        let outcome = match (self.state, self.outcome) {
            (State::Queued, _) => return Verdict::Queued,
            (State::Running, _) => return Verdict::Running,
            (State::Cancelled, _) | (_, Some(Outcome::Cancelled)) => return Verdict::Cancelled,
            (_, Some(o)) => o,
            (_, None) => return Verdict::Failed(Outcome::Killed),
        };
        let found = match outcome {
            Outcome::Ok => false,
            Outcome::Violation => true,
            Outcome::PresentFromStart => return Verdict::BrokenFromStart,
            failed => return Verdict::Failed(failed),
        };
        match (self.kind, self.request.expect) {
            (Kind::Fuzz | Kind::Campaign, _) => {
                if found {
                    Verdict::BugFound
                } else {
                    Verdict::NothingFound
                }
            }
            // sts minimize ends with 0 or a failure; a 1 would be a bug found all the same.
            (Kind::Minimize, _) => Verdict::Minimized,
            (Kind::Replay, None) => {
                if found {
                    Verdict::Reproduced
                } else {
                    Verdict::Vanished
                }
            }
            // Under `expect`, exit 0 means it held.
            (Kind::Replay, Some(want)) => {
                let held = !found;
                let reproduced = (want == Expect::Reproduce) == held;
                if held {
                    Verdict::AsExpected { reproduced }
                } else {
                    Verdict::NotAsExpected { reproduced }
                }
            }
        }
    }
}

/// What a proxy rule does to the messages it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleAction {
    Pass,
    Drop,
    /// Keep until `POST /proxies/NAME/release`.
    Hold,
    /// Deliver after `ms` milliseconds, keeping the connection's order.
    Delay,
    /// Send through a pipe of `rate` KB/s (1 KB = 1,000 bytes), one per
    /// connection and direction, in order (Toxiproxy's bandwidth).
    Bandwidth,
}

/// Which way a message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageDirection {
    ToController,
    ToSwitch,
}

/// One rule of a proxy's fault policy; the first rule that matches a
/// One rule of a proxy's fault policy, as Toxiproxy's toxics are: the first
/// rule that selects a message and wins its draw decides (echo messages
/// always pass). A rule with a `name` can be read, replaced, switched off
/// and removed on its own (`/proxies/NAME/rules/RULE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// Letters, digits, `-` and `_`; unique within the proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: RuleAction,
    /// Only messages of this type (`flow_mod`, `packet_in` ...).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub msg_type: Option<String>,
    /// Only this switch connection (numbered from 0 in connection order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<u64>,
    /// Only the switch with this datapath id (learned from its
    /// FEATURES_REPLY; the messages before it are not selected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datapath_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<MessageDirection>,
    /// For `delay`: milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
    /// For `delay`: up to this many milliseconds more or less, uniformly
    /// (Toxiproxy's latency jitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// For `bandwidth`: KB/s (1 KB = 1,000 bytes), at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u64>,
    /// The rule applies to each message it selects with this probability,
    /// 0 to 1 (Toxiproxy's toxicity; default 1); a message it passes over
    /// goes on to the next rule. Draws come from the proxy's seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// A rule switched off stays in the policy and selects nothing
    /// (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A proxy to create (`POST /proxies`): real switches connect to `listen`,
/// and each is relayed to `controller`, every message recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyRequest {
    /// Letters, digits, `-` and `_`.
    pub name: String,
    /// Address switches connect to (port 0: any free port).
    pub listen: String,
    /// The controller's address.
    pub controller: String,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    /// Seeds the draws of rules with a `probability` or `jitter_ms` (the
    /// same seed, the same draws for the same messages); default: from the
    /// time the proxy starts (given back in its info).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// A proxy's fault policy (`PUT /proxies/NAME/policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub rules: Vec<PolicyRule>,
}

/// A running proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProxyInfo {
    pub name: String,
    /// The address it listens on (the port filled in).
    pub listen: String,
    pub controller: String,
    pub rules: Vec<PolicyRule>,
    /// Switches relayed now.
    pub switches: usize,
    /// Messages seen so far.
    pub messages: u64,
    /// Messages held or delayed now.
    pub queued: usize,
    /// Messages written to the recording so far.
    pub recorded: u64,
    /// The seed of its rules' draws.
    pub seed: u64,
    /// The datapath id of each switch relayed now (from its FEATURES_REPLY),
    /// by connection number.
    pub datapath_ids: std::collections::BTreeMap<u64, u64>,
}

/// An error the API answered with: `{"error": "...", "status": 400}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    pub error: String,
    pub status: u16,
}

/// `GET /version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Version {
    /// sts's version.
    pub version: String,
    /// The API's version (changes when a route or type changes incompatibly).
    pub api: u32,
}

/// What went wrong talking to the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error.
    #[error("{} (HTTP {})", .0.error, .0.status)]
    Api(ApiError),
    /// No answer, or one that is not the API's.
    #[error("{0}")]
    Transport(String),
    /// `wait` ran out of time.
    #[error("job {0} not finished after {1:?}")]
    Timeout(i64, Duration),
}

/// The words `POST /reset` must carry: `{"confirm": "delete every job"}`.
pub const RESET_WORDS: &str = "delete every job";

/// A blocking client for `sts serve`.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:7878`).
    pub fn new(base: impl Into<String>) -> Client {
        // No pooled connections: the server closes idle ones after 15 s, and a
        // POST on a connection it just closed would not be retried.
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(60)).max_idle_connections(0).build();
        Client { base: base.into().trim_end_matches('/').to_string(), token: None, agent }
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// Sends the token read from `path` (a server's `DATA/token`, or the
    /// file given to its `--token-file`) with every request.
    pub fn with_token_file(self, path: impl AsRef<std::path::Path>) -> Result<Client, Error> {
        let path = path.as_ref();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(4096 + 2).read_to_string(&mut text))
            .map_err(|e| Error::Transport(format!("token file {}: {e}", path.display())))?;
        Ok(self.with_token(text.trim_end_matches(['\n', '\r'])))
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let r = self.agent.request(method, &format!("{}{path}", self.base));
        match &self.token {
            Some(t) => r.set("Authorization", &format!("Bearer {t}")),
            None => r,
        }
    }

    /// `GET /version`.
    pub fn version(&self) -> Result<Version, Error> {
        json(self.request("GET", "/version").call())
    }

    /// `POST /jobs`: submits a job.
    pub fn submit(&self, job: &JobRequest) -> Result<Job, Error> {
        json(self.request("POST", "/jobs").send_json(job))
    }

    /// `POST /jobs` as `multipart/form-data`: the job and a tar (or
    /// tar.gz) of its files.
    pub fn submit_with_files(&self, job: &JobRequest, tar: &[u8]) -> Result<Job, Error> {
        let boundary = "sts-client-boundary-7f1c2a9e";
        let mut body = Vec::new();
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"job\"\r\nContent-Type: application/json\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(&serde_json::to_vec(job).map_err(|e| Error::Transport(e.to_string()))?);
        body.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"files.tar\"\r\n\
                 Content-Type: application/x-tar\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(tar);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let req =
            self.request("POST", "/jobs").set("Content-Type", &format!("multipart/form-data; boundary={boundary}"));
        json(req.send_bytes(&body))
    }

    /// `GET /jobs/ID`.
    pub fn job(&self, id: i64) -> Result<Job, Error> {
        json(self.request("GET", &format!("/jobs/{id}")).call())
    }

    /// `GET /jobs`: every job, oldest first.
    pub fn jobs(&self) -> Result<Vec<Job>, Error> {
        json(self.request("GET", "/jobs").call())
    }

    /// `POST /jobs/ID/cancel`.
    pub fn cancel(&self, id: i64) -> Result<Job, Error> {
        json(self.request("POST", &format!("/jobs/{id}/cancel")).call())
    }

    /// `DELETE /jobs/ID`: forgets a final job and its files.
    pub fn delete(&self, id: i64) -> Result<(), Error> {
        self.request("DELETE", &format!("/jobs/{id}")).call().map(drop).map_err(error)
    }

    /// `POST /reset`: cancels and forgets every job and stops every proxy
    /// (test isolation). Sends the confirmation the server requires.
    pub fn reset(&self) -> Result<(), Error> {
        self.request("POST", "/reset").send_json(serde_json::json!({ "confirm": RESET_WORDS })).map(drop).map_err(error)
    }

    /// `GET /jobs/ID/log`: the job's output so far.
    pub fn log(&self, id: i64) -> Result<String, Error> {
        let r = self.request("GET", &format!("/jobs/{id}/log")).call().map_err(error)?;
        r.into_string().map_err(|e| Error::Transport(e.to_string()))
    }

    /// `GET /jobs/ID/NAME`: an artifact's bytes (`experiment.tar.gz`,
    /// `report.html`, `trace.pcapng`, `junit.xml`).
    pub fn artifact(&self, id: i64, name: &str) -> Result<Vec<u8>, Error> {
        let r = self.request("GET", &format!("/jobs/{id}/{name}")).call().map_err(error)?;
        let mut bytes = Vec::new();
        r.into_reader().read_to_end(&mut bytes).map_err(|e| Error::Transport(e.to_string()))?;
        Ok(bytes)
    }

    /// `POST /proxies`: starts a proxy.
    pub fn create_proxy(&self, proxy: &ProxyRequest) -> Result<ProxyInfo, Error> {
        json(self.request("POST", "/proxies").send_json(proxy))
    }

    /// `POST /proxies/populate`: makes these proxies exist as described.
    pub fn populate_proxies(&self, proxies: &[ProxyRequest]) -> Result<Vec<ProxyInfo>, Error> {
        json(self.request("POST", "/proxies/populate").send_json(proxies))
    }

    /// `GET /proxies`.
    pub fn proxies(&self) -> Result<Vec<ProxyInfo>, Error> {
        json(self.request("GET", "/proxies").call())
    }

    /// `GET /proxies/NAME`.
    pub fn proxy(&self, name: &str) -> Result<ProxyInfo, Error> {
        json(self.request("GET", &format!("/proxies/{name}")).call())
    }

    /// `PUT /proxies/NAME/policy`.
    pub fn set_policy(&self, name: &str, rules: Vec<PolicyRule>) -> Result<ProxyInfo, Error> {
        json(self.request("PUT", &format!("/proxies/{name}/policy")).send_json(Policy { rules }))
    }

    /// Adds `rule` (named) at the end of proxy `name`'s policy (`POST
    /// /proxies/NAME/rules`).
    pub fn add_rule(&self, name: &str, rule: &PolicyRule) -> Result<ProxyInfo, Error> {
        json(self.request("POST", &format!("/proxies/{name}/rules")).send_json(rule))
    }

    /// Rule `rule` of proxy `name` (`GET /proxies/NAME/rules/RULE`).
    pub fn rule(&self, name: &str, rule: &str) -> Result<PolicyRule, Error> {
        json(self.request("GET", &format!("/proxies/{name}/rules/{rule}")).call())
    }

    /// Replaces rule `rule` of proxy `name`, in its place (`PUT
    /// /proxies/NAME/rules/RULE`): to switch it off, send it with
    /// `enabled: false`.
    pub fn replace_rule(&self, name: &str, rule: &str, with: &PolicyRule) -> Result<ProxyInfo, Error> {
        json(self.request("PUT", &format!("/proxies/{name}/rules/{rule}")).send_json(with))
    }

    /// Removes rule `rule` of proxy `name` (`DELETE /proxies/NAME/rules/RULE`).
    pub fn delete_rule(&self, name: &str, rule: &str) -> Result<(), Error> {
        self.request("DELETE", &format!("/proxies/{name}/rules/{rule}")).call().map(drop).map_err(error)
    }

    /// `POST /proxies/NAME/release`: how many held messages went on.
    pub fn release(&self, name: &str) -> Result<u64, Error> {
        let v: serde_json::Value = json(self.request("POST", &format!("/proxies/{name}/release")).call())?;
        v["released"].as_u64().ok_or_else(|| Error::Transport(format!("unexpected answer {v}")))
    }

    /// `DELETE /proxies/NAME`.
    pub fn delete_proxy(&self, name: &str) -> Result<(), Error> {
        self.request("DELETE", &format!("/proxies/{name}")).call().map(drop).map_err(error)
    }

    /// `GET /proxies/NAME/recording`: the recording so far (JSON Lines).
    pub fn recording(&self, name: &str) -> Result<String, Error> {
        let r = self.request("GET", &format!("/proxies/{name}/recording")).call().map_err(error)?;
        r.into_string().map_err(|e| Error::Transport(e.to_string()))
    }

    /// Polls job `id` until it is final, for at most `timeout`.
    pub fn wait(&self, id: i64, timeout: Duration) -> Result<Job, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let job = self.job(id)?;
            if job.state.is_final() {
                return Ok(job);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(id, timeout));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn json<T: serde::de::DeserializeOwned>(r: Result<ureq::Response, ureq::Error>) -> Result<T, Error> {
    r.map_err(error)?.into_json().map_err(|e| Error::Transport(e.to_string()))
}

fn error(e: ureq::Error) -> Error {
    match e {
        ureq::Error::Status(status, r) => {
            let text = r.into_string().unwrap_or_default();
            Error::Api(serde_json::from_str(&text).unwrap_or(ApiError { error: text, status }))
        }
        e => Error::Transport(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(kind: Kind, code: i32, expect: Option<Expect>) -> Job {
        let outcome = Outcome::of_exit_code(code);
        Job {
            id: 1,
            kind,
            state: outcome.state(),
            outcome: Some(outcome),
            exit_code: Some(code),
            error: None,
            summary: None,
            created_ms: 0,
            started_ms: None,
            finished_ms: None,
            attempts: 1,
            progress: None,
            request: JobRequest { kind: Some(kind), expect, ..JobRequest::default() },
        }
    }

    #[test]
    fn a_verdict_reads_the_exit_code_in_its_kinds_words() {
        let v = |kind, code, expect| finished(kind, code, expect).verdict();
        assert_eq!(v(Kind::Fuzz, 0, None), Verdict::NothingFound);
        assert_eq!(v(Kind::Fuzz, 1, None), Verdict::BugFound);
        assert_eq!(v(Kind::Fuzz, 4, None), Verdict::BrokenFromStart);
        assert_eq!(v(Kind::Campaign, 1, None), Verdict::BugFound);
        // Exit 0 of a minimization is a bug minimized, not "nothing found".
        assert_eq!(v(Kind::Minimize, 0, None), Verdict::Minimized);
        assert_eq!(v(Kind::Minimize, 0, None).tone(), Tone::Bug);
        assert_eq!(v(Kind::Replay, 1, None), Verdict::Reproduced);
        assert_eq!(v(Kind::Replay, 0, None), Verdict::Vanished);
        // Under --expect reproduce, exit 0 means it reproduced.
        assert_eq!(v(Kind::Replay, 0, Some(Expect::Reproduce)), Verdict::AsExpected { reproduced: true });
        assert_eq!(v(Kind::Replay, 1, Some(Expect::Reproduce)), Verdict::NotAsExpected { reproduced: false });
        assert_eq!(v(Kind::Replay, 0, Some(Expect::Vanish)), Verdict::AsExpected { reproduced: false });
        assert_eq!(v(Kind::Replay, 1, Some(Expect::Vanish)), Verdict::NotAsExpected { reproduced: true });
        assert_eq!(v(Kind::Replay, 3, None), Verdict::Failed(Outcome::Environment));
        assert_eq!(v(Kind::Replay, 3, None).tone(), Tone::Error);
    }
}
