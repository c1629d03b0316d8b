//! The `sts` command line's arguments (clap): every subcommand, its options and their values.

use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use sts_engine::minimize::PeekMode;
use sts_invariants::Same;

/// `--same`: a level of sameness, its names listed in `--help` and errors.
fn same_level() -> impl TypedValueParser<Value = Same> {
    PossibleValuesParser::new(Same::ALL.map(Same::name)).try_map(|s| s.parse::<Same>())
}

/// `--peek`: a PEEK mode by its command-line name.
fn peek_mode() -> impl TypedValueParser<Value = PeekMode> {
    PossibleValuesParser::new(PeekMode::ALL.map(PeekMode::name))
        .try_map(|s| PeekMode::from_name(&s).ok_or_else(|| format!("'{s}' is not a PEEK mode")))
}

/// `on` or `off`.
fn on_off() -> impl TypedValueParser<Value = bool> {
    PossibleValuesParser::new(["on", "off"]).map(|s| s == "on")
}

/// `sts explore --from`: where a variant's replay starts.
fn explore_start() -> impl TypedValueParser<Value = sts_engine::explore::Start> {
    use sts_engine::explore::Start;
    PossibleValuesParser::new(["branch", "handshakes", "fresh"]).map(|s| match s.as_str() {
        "branch" => Start::Branch,
        "handshakes" => Start::Handshakes,
        _ => Start::Fresh,
    })
}

/// Where work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExecutorKind {
    // Described by each option that takes it.
    Local,
    Slurm,
}

/// Troubleshoot SDN controllers as black boxes: run them against a mock
/// network through an OpenFlow interposition proxy, fuzz them with external
/// events, check network invariants, and shrink failing runs to a minimal
/// causal sequence.
#[derive(Debug, Parser)]
#[command(name = "sts", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// How progress and notices are shown on stderr: `auto` (bars on a terminal, a line every few
    /// seconds otherwise) or `json` (one JSON object per line, `{"progress":{...}}` or
    /// `{"notice":{...}}`, for programs that drive sts; `sts serve` runs its jobs this way).
    #[arg(long, global = true, default_value = "auto", value_parser = ["auto", "json"])]
    pub progress: String,
    #[command(subcommand)]
    pub command: Command,
}

use sts_engine::minimize::MAX_BUDGET_S;

const EXIT_CODES: &str = "Exit codes: 0 success / nothing found, 1 violation found or not all reachable, \
2 bad input (config, trace, arguments), 3 environment failure (controller did not start, port taken), \
4 (fuzz) a violation present before the first input, 5 (minimize) the original trace does not reproduce its violation.";

/// Where the replays of a minimization (and a campaign's runs) go.
#[derive(Debug, clap::Args)]
pub struct ExecutorArgs {
    /// `local` (this machine, --jobs at a time) or `slurm` (one allocation of --max-tasks tasks, each
    /// running a warm `sts worker` that candidates, final replays and a campaign's seeds are handed
    /// to). Slurm needs the experiment directory on storage every node shares (docs/cluster.md).
    #[arg(long, value_enum, default_value_t = ExecutorKind::Local)]
    pub executor: ExecutorKind,
    /// Slurm partition (default: the cluster's default one).
    #[arg(long)]
    pub partition: Option<String>,
    /// Slurm tasks, one warm worker each (candidates tested at once).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_tasks: u32,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring up the network and its controllers, ping every host pair, print the matrix.
    Pingall {
        /// Experiment config (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Keep the controllers' logs in this directory. Without it they go
        /// to a temporary directory, removed when every pair reached and
        /// kept (and named) when not.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Inject random external events and check invariants until a violation or the step budget.
    Fuzz {
        /// Experiment config (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Experiment directory to write (config, seed, trace, logs, violation).
        #[arg(long)]
        out: PathBuf,
        /// Use this seed instead of the config's [fuzz] seed (the experiment's config says it).
        #[arg(long)]
        seed: Option<u64>,
        /// Also write the result as JUnit XML (one test case, failing with the violation), for CI.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Replays of a find before it is reported (into OUT/check/N): a find
        /// that does not come back is said to be so. 0 skips the check.
        #[arg(long, default_value_t = 1, value_name = "N")]
        check: u32,
    },
    /// Replay a recorded trace and report how often its violation reproduces.
    ///
    /// Exit code: 1 when the violation reproduced in some run, 0 when in none;
    /// with --expect, 0 when the expectation held and 1 when it did not (for CI).
    Replay {
        /// Experiment directory holding the trace.
        dir: PathBuf,
        /// Number of replays (at least 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// What a CI check expects: `reproduce` (the bug is still there: some
        /// run reproduces it) or `vanish` (it is fixed: no run does). Exit 0
        /// when that holds, 1 when not.
        #[arg(long, value_parser = ["reproduce", "vanish"])]
        expect: Option<String>,
        /// When a replay's violation is the original's: `culprit` (the same cause, whoever the victim),
        /// `victim` (the same host or element, whatever the cause), `kind` (the same invariant) or
        /// `exact`. Default: the config's `[invariants] same`, else `culprit` (docs/invariants.md).
        #[arg(long, value_parser = same_level())]
        same: Option<Same>,
        /// Also write the result as JUnit XML (one test case per replay: failing when the bug reproduces,
        /// or, with --expect reproduce, when it does not), for CI.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Where to replay: `mock` (sts's mock network) or `ovs`: real Open vSwitch bridges, veths and
        /// host namespaces built like the config's network (scripts/ovs-testbed; needs root), the
        /// experiment's controllers started for real behind a recording proxy, the trace's inputs
        /// injected with their recorded spacing, then every bridge's flows and groups read back and
        /// checked with the config's invariants. A run reproduces when it shows the recorded violation
        /// (same invariant and victim); the culprit is compared too. Runs go to DIR/ovs/N/ (tables,
        /// recordings, controller logs), the verdicts to DIR/ovs/summary.json; inputs a testbed cannot
        /// perform are listed and skipped (docs/testbeds.md).
        #[arg(long, default_value = "mock", value_parser = ["mock", "ovs"])]
        on: String,
    },
    /// Delta-debug a failing trace down to a minimal causal sequence (written to DIR/mcs/).
    ///
    /// Resumable: killed and started again, it continues from its last completed
    /// replay (DIR/mcs/state.json).
    Minimize {
        /// Experiment directory holding the trace (with its violation).
        dir: PathBuf,
        /// Replays per candidate subsequence; one reproduction is enough (copes with non-determinism).
        #[arg(long, default_value_t = 1)]
        replays: u32,
        /// Candidates replayed at once, each with its own controllers.
        #[arg(long, default_value_t = 1)]
        jobs: u32,
        /// Stop after this many seconds with the smallest sequence so far (at most ten years).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUDGET_S))]
        budget: Option<u64>,
        /// Replays of the final sequence, for its reproduction rate.
        #[arg(long, default_value_t = 10)]
        final_replays: u32,
        /// PEEK: infer each candidate's internal events before replaying it: `on` by one dry run of its
        /// inputs, `prefix` by a prefix replay per input, `checkpoints` by one run with a checkpoint and
        /// rollback per input (needs virtual time; falls back to `prefix`).
        #[arg(long, default_value = "off", value_parser = peek_mode())]
        peek: PeekMode,
        /// After delta debugging, look past a 1-minimal result of three inputs or more for a smaller
        /// sequence: the trace without the result's inputs (and without all but one of them) is
        /// tried, one replay each, and minimized in turn if it reproduces, within as many replays as
        /// delta debugging took (docs/evaluation.md).
        #[arg(long, default_value = "on", value_parser = on_off(), action = clap::ArgAction::Set)]
        beyond: bool,
        /// When a round of delta debugging replays fewer candidates than there are places (--jobs, or
        /// Slurm tasks), test the candidates of the rounds that may follow in the free places (their
        /// verdicts wait for their round), and with --replays 2 or more start a candidate's next
        /// replay beside the one under way where nothing else wants the place. The result is the
        /// same either way (docs/cluster.md).
        #[arg(long, default_value = "on", value_parser = on_off(), action = clap::ArgAction::Set)]
        speculate: bool,
        /// Before splitting the trace in halves, try removing each kind of input whole (every ping,
        /// every switch failure ...), one candidate per kind: a bug that needs no traffic loses all
        /// of it in one round. The result is still 1-minimal (docs/evaluation.md).
        #[arg(long = "by-kind", default_value = "on", value_parser = on_off(), action = clap::ArgAction::Set)]
        by_kind: bool,
        /// Replay candidates from a checkpoint of their controllers taken once the switches have
        /// completed their handshakes, instead of starting controllers and handshaking for every
        /// replay (about a third of a short replay). Needs virtual time and single-threaded
        /// controllers forked from snapshots; otherwise every replay is fresh. On Slurm each worker
        /// keeps one such run. The final replays are always fresh (docs/snapshots.md).
        #[arg(long, default_value = "on", value_parser = on_off(), action = clap::ArgAction::Set)]
        warm: bool,
        /// Presume that a part of a candidate seen not to reproduce does not reproduce either (a bug
        /// that needs several inputs needs them all): delta debugging's chunks that are such parts are
        /// not replayed. The complements of its last round are, so the result is still 1-minimal. It
        /// stops by itself once a candidate reproduces though a larger one did not (a bug that is not
        /// monotone, or not deterministic); `off` replays every chunk (docs/evaluation.md).
        #[arg(long, default_value = "on", value_parser = on_off(), action = clap::ArgAction::Set)]
        monotone: bool,
        /// When a candidate's violation is the original's: `culprit` (the same cause, whoever the victim),
        /// `victim` (the same host or element, whatever the cause), `kind` (the same invariant) or
        /// `exact`. Default: the config's `[invariants] same`, else `culprit` (docs/invariants.md).
        #[arg(long, value_parser = same_level())]
        same: Option<Same>,
        /// Also write the result as JUnit XML (one failing test case: the bug, with its minimal causal
        /// sequence), for CI.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Then minimize the OpenFlow messages too: the smallest set of deliveries (the others dropped
        /// by the proxy) with which the minimal sequence of inputs still shows the same bug; the
        /// handshake, keepalives, barriers and roles always pass. Writes DIR/mcs/internal.json and a
        /// section of DIR/mcs/report.md.
        #[arg(long)]
        internal: bool,
        /// First learn fingerprint masks from this many replays (as `sts learn DIR --runs N`), so
        /// candidates' replays match messages with volatile fields the hand-written masks keep.
        #[arg(long, value_name = "RUNS", value_parser = clap::value_parser!(u32).range(1..=100))]
        learn: Option<u32>,
        #[command(flatten)]
        executor: ExecutorArgs,
    },
    /// Fuzz one config under many seeds, group what the runs find into distinct bugs (by bug
    /// identity), and minimize one run of each.
    ///
    /// Writes OUT/seeds/SEED/ (one experiment per seed; the MCS of each bug in its minimized run's
    /// mcs/), OUT/summary.json and OUT/summary.md. Exit code: 1 when some bug was found, 0 when none.
    Campaign {
        /// Experiment config (TOML); its [fuzz] seed is replaced by each seed in turn.
        #[arg(long)]
        config: PathBuf,
        /// Seeds to fuzz: A..B (inclusive) or one seed.
        #[arg(long, value_name = "A..B")]
        seeds: String,
        /// Directory to write the campaign into.
        #[arg(long)]
        out: PathBuf,
        /// Fuzz runs at once, each with its own controllers.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        jobs: u32,
        /// When two runs found the same bug, and what a minimization keeps: `culprit` (default: the
        /// config's `[invariants] same`, else culprit), `victim`, `kind` or `exact`.
        #[arg(long, value_parser = same_level())]
        same: Option<Same>,
        /// Replays per candidate in each minimization.
        #[arg(long, default_value_t = 1)]
        replays: u32,
        /// Replays of each bug's final sequence, for its reproduction rate.
        #[arg(long, default_value_t = 10)]
        final_replays: u32,
        /// Stop each minimization after this many seconds with its smallest sequence so far.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_BUDGET_S))]
        budget: Option<u64>,
        /// Also write the result as JUnit XML (one failing test case per distinct bug), for CI.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        #[command(flatten)]
        executor: ExecutorArgs,
    },
    /// Run work handed over standard input, one JSON line at a time, answering on standard output,
    /// controllers kept warm between pieces (what each Slurm task runs; docs/cluster.md).
    #[command(hide = true)]
    Worker,
    /// Write a trace's OpenFlow messages and its hosts' frames as pcapng files, for
    /// Wireshark or tshark.
    ///
    /// OpenFlow: one TCP stream per switch–controller connection, controller port 6653, the run's
    /// own times. The dataplane: one interface per host (named after it), each frame it sent
    /// (outbound) or received (inbound). Reads DIR/trace.jsonl, or a replay's or the MCS's with
    /// DIR/replays/N or DIR/mcs/final/N.
    Pcap {
        /// Experiment directory holding the trace.
        dir: PathBuf,
        /// Where to write the OpenFlow messages (default DIR/trace.pcapng).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Where to write the hosts' frames (default DIR/dataplane.pcapng; not written when the
        /// trace recorded none).
        #[arg(long)]
        dataplane: Option<PathBuf>,
    },
    /// Learn which OpenFlow message fields vary between equivalent runs, so replays match them.
    ///
    /// Replays DIR's trace RUNS times (into DIR/learn/N), lines each run's messages up with the
    /// original's (per switch, controller, direction and type, in order), and learns the fields
    /// that differ in messages that otherwise agree (a nonce, a timestamp). Saves DIR/masks.json,
    /// which replay, minimize and the console then apply; prints each replay's divergence from
    /// the original with the hand-written masks alone and with the learned ones.
    Learn {
        /// Experiment directory holding the trace.
        dir: PathBuf,
        /// Replays to learn from.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
    },
    /// Write DIR/report/index.html: the run as a space-time diagram (self-contained).
    ///
    /// One lane per controller and switch and one for sts; OpenFlow messages
    /// as arrows, inputs as dots (the MCS's highlighted when DIR/mcs/ exists),
    /// the violation in red; below it, the flow tables at the violation and a
    /// diff against the latest replay (DIR/replays/N), or of the MCS against
    /// its replay. `--shiviz` writes DIR/trace.shiviz instead, to
    /// open in ShiViz with the regular expression it prints. fuzz and minimize
    /// write the HTML report themselves.
    Report {
        /// Experiment directory holding the trace.
        dir: PathBuf,
        /// Write the ShiViz log instead of the HTML report.
        #[arg(long)]
        shiviz: bool,
        /// Where to write the ShiViz log (default DIR/trace.shiviz).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Step through a trace with the real controllers, or drive a live session by hand (OFRewind-style,
    /// with time travel).
    ///
    /// `sts console DIR` replays DIR's trace one input at a time (the session's own trace goes to
    /// DIR/console/N); `sts console --config FILE DIR` starts a live session of FILE with no trace,
    /// recorded into the new experiment DIR. Between steps: look at the network (nodes, links, hosts,
    /// ports, flows, groups, check), set breakpoints (seq, input type, OpenFlow message type,
    /// invariant), hold OpenFlow messages and deliver, drop or delay them one by one, inject inputs
    /// (link, switch, controller, migrate, ping, pingall, partition), checkpoint and rewind, save the
    /// session as an experiment. `help` inside lists every command. On a terminal: history,
    /// completion, Enter repeats `next`, Ctrl-C pauses a running `continue`, Ctrl-D ends; from
    /// --script FILE or a pipe, one command per line. docs/console.md walks through a session.
    Console {
        /// Experiment directory: the trace to replay, or (with --config) the live session to record.
        dir: PathBuf,
        /// A live session of this experiment config, recorded into DIR (created like `sts fuzz --out`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Read commands from this file instead of the terminal.
        #[arg(long)]
        script: Option<PathBuf>,
        /// One JSON object per reply line ({"command", "ok", "output": [lines], ...fields}).
        #[arg(long)]
        json: bool,
    },
    /// An HTTP API and a durable job queue: submit fuzz, replay, minimize and campaign jobs, follow
    /// and cancel them, fetch their results; and OpenFlow proxies managed over HTTP (docs/api.md).
    ///
    /// Jobs are kept in DATA/jobs.sqlite and DATA/jobs/ID/, and run as `sts` processes, WORKERS at a
    /// time; a restart runs again what was running (a minimization resumes). One server per data
    /// directory.
    ///
    /// Whoever can submit a job can run commands as this server's user: a job's config names the
    /// controller commands (and policy commands) it runs. So every request must carry the token
    /// (`Authorization: Bearer TOKEN`): DATA/token, made at the first start (owner-only), or
    /// --token-file. Requests naming a Host that is not the server's, and requests from web pages
    /// (an Origin header) not allowed by --allow-origin, are refused before the token is looked at.
    /// A browser opens the index with http://ADDR/?token=TOKEN once (a read-only cookie).
    #[command(verbatim_doc_comment)]
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: std::net::SocketAddr,
        /// Data directory (the job store, each job's files, experiments/ for jobs to refer to, the token).
        #[arg(long, default_value = "sts-data")]
        data: PathBuf,
        /// Jobs run at once.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
        workers: u32,
        /// File holding the bearer token every request must carry, instead of DATA/token
        /// (one line of printable ASCII).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// A host name requests may carry in `Host` besides loopback's and the listening address
        /// (a name this machine is reached by); repeatable.
        #[arg(long, value_name = "NAME")]
        allow_host: Vec<String>,
        /// A browser origin (scheme://host:port) whose pages may call the API with the token;
        /// repeatable. None by default: pages on other origins are refused.
        #[arg(long, value_name = "ORIGIN")]
        allow_origin: Vec<String>,
        /// `local` (jobs run here) or `slurm` (each job a Slurm job, through srun; DATA must be on
        /// storage every node shares). --workers still bounds the jobs at once.
        #[arg(long, value_enum, default_value_t = ExecutorKind::Local)]
        executor: ExecutorKind,
        /// Slurm partition for the jobs (default: the cluster's default one).
        #[arg(long)]
        partition: Option<String>,
    },
    /// Make a recording of real switches (`sts proxy --record`) into an experiment that replays on the
    /// mock network with the same controller; --check N replays it and compares the controller's messages
    #[command(after_help = "Build the testbed with the config's wiring (`sts import --config FILE --wiring`; \
scripts/ovs-testbed does it with Open vSwitch), record through `sts proxy`, then import: link failures and \
recoveries seen in PORT_STATUS become inputs; disagreements between the testbed and the mock network are \
listed. Exit 0 when every checked replay sent the recorded controller-to-switch messages, 1 when some did not.")]
    Import {
        /// The recording (`sts proxy --record FILE`).
        #[arg(required_unless_present = "wiring")]
        recording: Option<PathBuf>,
        /// The experiment config whose network the testbed was built as, with the same controller.
        #[arg(long)]
        config: PathBuf,
        /// Experiment directory to write (config, trace, import.json).
        #[arg(long, required_unless_present = "wiring")]
        out: Option<PathBuf>,
        /// Replay the import N times and count the replays whose controller-to-switch messages
        /// (fingerprints, per switch) are the recording's.
        #[arg(long, value_name = "N", default_value_t = 0)]
        check: u32,
        /// Print the wiring a testbed needs to match the config (switches, links with port numbers,
        /// hosts with MAC and IP) and exit.
        #[arg(long)]
        wiring: bool,
    },
    /// Try the message orders an interposer can flip around a run: each conflicting pair that
    /// timing alone ordered, its first message held past the second event; a variant that ends in
    /// a violation is written as a find.
    #[command(after_help = "DIR is an experiment directory (config.toml and trace.jsonl: a fuzz run, a \
hand-written input sequence). Its trace is replayed once (DIR/explore/base); the happens-before \
analysis of that run (docs/races.md) lists the conflicting pairs nothing but timing ordered; each \
becomes a variant, the run's inputs with one `control_delay_next` just before the pair's first message \
holding it past the second event (flips past an input first). Variants are replayed in turn (each \
from a checkpoint of the run taken where it leaves it, unless --from says otherwise) until one ends \
in a persistent violation, written as \
DIR/explore/finds/N (config, trace, violation, logs: `sts minimize`, `replay`, `console` and `report` \
work on it), or --all of them are tried, or --budget runs out. DIR/explore/frontier.json keeps the \
candidates and how many were tried, rewritten after every variant: `--resume` goes on from there \
(after the budget ran out, Ctrl-C, a crash) without replaying the base again. With --depth 2, once every \
one-fault variant is tried without a find (or with --all), each one's own run is analysed in turn and its \
flips after its fault become two-fault variants (docs/races.md). Exit 0 when nothing was \
found, 1 when something was (or the run itself already violates), 2 for a malformed directory or \
nothing to resume, 3 when a controller cannot run.")]
    Explore {
        /// The experiment directory (or --config and --out: a fuzz run first).
        #[arg(required_unless_present = "config")]
        dir: Option<PathBuf>,
        /// Fuzz an input sequence from this experiment config (its [fuzz] section, as `sts fuzz`
        /// does) into --out, then explore the orders around it; a fuzz run that already violates
        /// is said so (exit 1) and `sts minimize OUT` shrinks it.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["dir", "resume"], requires = "out")]
        config: Option<PathBuf>,
        /// With --config: use this seed instead of the config's [fuzz] seed.
        #[arg(long, value_name = "SEED", requires = "config")]
        seed: Option<u64>,
        /// The most variants to replay.
        #[arg(long, default_value_t = 200, value_name = "N")]
        budget: usize,
        /// Keep going after the first find.
        #[arg(long)]
        all: bool,
        /// Where each variant's replay starts: `branch`, a checkpoint of the run taken where the
        /// variant leaves it (only what follows is replayed); `handshakes`, a checkpoint taken
        /// after the handshakes (as `sts minimize --warm`); `fresh`, new controllers every time.
        /// Checkpoints need virtual time and forked controllers; without them every variant is
        /// fresh (the output says why).
        #[arg(long = "from", value_name = "START", default_value = "branch", value_parser = explore_start())]
        start: sts_engine::explore::Start,
        /// A message a controller sends at most this long after receiving one counts as its
        /// reaction (`sts races --reaction-ms`).
        #[arg(long, value_name = "MS", default_value_t = 50)]
        reaction_ms: u64,
        /// Replay the run and list the orders it offers to flip; try none.
        #[arg(long)]
        list: bool,
        /// Hold random messages instead (a random one per variant, 50-1,000 ms, from this seed):
        /// random message fuzzing around the same inputs, the baseline docs/evaluation.md compares
        /// the analysis against.
        #[arg(long, value_name = "SEED")]
        random: Option<u64>,
        /// Losses instead of orders: each FLOW_MOD the run sent, dropped at the proxy in its own
        /// variant (rules that send packets to the controller first: lost, they leave a switch
        /// silent); with --random, random messages dropped.
        #[arg(long)]
        drops: bool,
        /// Where the exploration is written (its base run, frontier and finds) [default:
        /// DIR/explore]; with --config, the experiment directory the input sequence is fuzzed into
        /// (the exploration then in OUT/explore).
        #[arg(long, value_name = "OUT")]
        out: Option<PathBuf>,
        /// Go on from where the last exploration into OUT stopped (its budget, a signal, a crash):
        /// the same base run and candidates, the untried ones next, finds numbered on. Needs the
        /// options it started with (--random, --drops).
        #[arg(long)]
        resume: bool,
        /// The most faults in one variant (a delay bound): 1, or 2 to go on, once every
        /// one-fault variant is tried without a find (or with --all), with each one's own run:
        /// its flips armed after its fault, less those armed where an earlier variant left the
        /// same state (every process's history so far) with the same fault.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u64).range(1..=sts_engine::explore::MAX_DEPTH as u64))]
        depth: u64,
        /// Print the result as one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Races in one run: pairs of events nothing ordered whose order matters, and which of them
    /// decide the violation.
    #[command(after_help = "DIR is an experiment directory (a fuzz find, a replay under DIR/replays/N, \
a minimization's DIR/mcs, a console session). Its trace's inputs and OpenFlow messages are put in a \
happens-before order (inputs in order; messages on one connection in order; a reply after its request; \
what a controller sends after the message it was handling; a PACKET_IN after the PACKET_OUT that \
carried its frame) and every pair that conflicts (a rule and a packet it matches at a switch; two \
switches' messages about one host or port at a controller; a policy change and what the controller \
learns around it) but is not ordered is a race. A race is harmful when its order decides the violation: \
the later event leads to the FLOW_MOD of the culprit rule and concerns what it matches, or is what the \
controller was handling when it failed (docs/races.md). A trace recording inputs only (written by \
hand) is read through its latest replay. Exit 0 when no race is harmful, 1 when one is, 2 for a \
directory without a readable trace.")]
    Races {
        /// The experiment directory.
        dir: PathBuf,
        /// List every race, not only the harmful ones.
        #[arg(long)]
        all: bool,
        /// Print the result as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// A message a controller sends at most this long after receiving one counts as its
        /// reaction (later ones are a timer's).
        #[arg(long, value_name = "MS", default_value_t = 50)]
        reaction_ms: u64,
    },
    /// Check a real network's rule updates one at a time (loops, with witnesses), a testbed's
    /// `dump-flows`, or an experiment's tables at its violation.
    #[command(after_help = "DIR is a data set in the format of the data-plane verification benchmarks \
(the Stanford backbone as APKeep packages it: topo.txt, vlan.txt, updates; docs/invariants.md): every \
update is installed as FLOW_MOD messages on a mock network of its routers and re-checked incrementally; \
each violation is reported with the update that made it appear and a witness, and the time per update. \
Or DIR holds one `ovs-ofctl --no-names dump-flows` listing per bridge, named s<DPID>.flows \
(`scripts/ovs-testbed dump TESTBED DIR` writes them with the testbed's config.toml): the tables are \
installed on the config's network and checked with its invariants. \
Or DIR is an experiment directory (a trace): the network at its violation, each switch's tables rebuilt \
from the controllers' messages, is checked again and compared with the run's own verdict. Exit 0 when \
nothing was found, 1 when some violation was, 2 for a malformed data set, dump or experiment, 3 when \
the --times file cannot be written.")]
    Verify {
        /// The data set, directory of dump-flows listings, or experiment directory.
        dir: PathBuf,
        /// Stop after the first N updates.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Print the result as one JSON object (violations, timings) instead of text.
        #[arg(long)]
        json: bool,
        /// Also write every update's times to this CSV file (update, line,
        /// apply_us, check_us, rule), for plotting or finding the slow ones.
        #[arg(long, value_name = "FILE")]
        times: Option<PathBuf>,
        /// For a directory of `dump-flows` files: the sts config whose
        /// network the bridges form (default: DIR/config.toml, which
        /// `scripts/ovs-testbed dump` writes).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Standalone interposition between real switches and a controller.
    Proxy {
        /// Address switches connect to (port 0: one the kernel picks; the
        /// first line on stderr says which).
        #[arg(long)]
        listen: String,
        /// The controller's address.
        #[arg(long)]
        controller: String,
        /// File to record every message into (JSON Lines).
        #[arg(long)]
        record: Option<PathBuf>,
        /// Drop every message of this type (e.g. packet_out); repeatable.
        #[arg(long, value_name = "TYPE")]
        drop: Vec<String>,
        /// Delay every message of this type by MS milliseconds, keeping each
        /// connection's order (e.g. flow_mod=200); repeatable.
        #[arg(long, value_name = "TYPE=MS")]
        delay: Vec<String>,
        /// Send every message through a pipe of this many KB/s (1 KB = 1,000
        /// bytes), one per connection and direction, in order (Toxiproxy's
        /// bandwidth); after the --drop and --delay rules; echoes pass.
        #[arg(long, value_name = "KB_PER_S", value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
        bandwidth: Option<u64>,
        /// Switches relayed at once; later ones are refused (closed, with a warning) until some leave.
        /// Also capped by the open-file limit (two descriptors per switch).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        max_switches: u32,
    },
}
