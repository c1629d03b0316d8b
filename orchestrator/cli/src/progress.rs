//! How the command line shows a job's progress: bars on a terminal, and a
//! plain line every few seconds where there is none (CI logs, batch jobs).
//! Notices are printed as they come, above any bar.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use sts_engine::{Notice, Observer, Progress};

/// How often a line is printed without a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// The command line's observer.
pub struct Terminal {
    tty: bool,
    /// One JSON object per line instead of bars or text.
    json: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    bar: Option<(&'static str, ProgressBar)>,
    last_line: Option<Instant>,
    /// The job phase under way (fuzzing, minimizing ...), if any.
    outer: Option<&'static str>,
}

/// Phases that run sessions of their own: the handshakes of those sessions
/// are theirs, and must not take the job's place on screen.
fn is_outer(phase: &str) -> bool {
    matches!(phase, "fuzzing" | "replaying" | "minimizing" | "final replays" | "campaign")
}

impl Terminal {
    /// Bars when stderr is a terminal, lines otherwise.
    pub fn new() -> Terminal {
        // Lines start after the first interval: a job done in a few seconds
        // says nothing in a log but its result (no opening "handshakes: 0/N").
        let state = State { last_line: Some(Instant::now()), ..State::default() };
        Terminal { tty: std::io::stderr().is_terminal(), json: false, state: Mutex::new(state) }
    }

    /// One JSON object per line on stderr, for programs driving sts.
    pub fn json() -> Terminal {
        Terminal { tty: false, json: true, state: Mutex::new(State::default()) }
    }
}

/// The phase a progress report belongs to (one bar per phase).
fn phase(p: &Progress) -> &'static str {
    match p {
        Progress::Handshakes { .. } => "handshakes",
        Progress::Pings { .. } => "pings",
        Progress::Fuzz { .. } => "fuzzing",
        Progress::Replay { .. } => "replaying",
        Progress::Minimize { .. } => "minimizing",
        Progress::FinalReplays { .. } => "final replays",
        Progress::Explore { .. } => "explore",
        Progress::Campaign { .. } => "campaign",
        Progress::Done => "",
    }
}

/// (position, length) for a bar, when the phase has a known length.
fn counts(p: &Progress) -> Option<(u64, u64)> {
    match p {
        Progress::Handshakes { done, total } | Progress::Pings { done, total } => Some((*done, *total)),
        Progress::Fuzz { step, steps, .. } => Some((u64::from(*step), u64::from(*steps))),
        Progress::Replay { run, of } => Some((u64::from(*run) - 1, u64::from(*of))),
        Progress::FinalReplays { done, total } => Some((u64::from(*done), u64::from(*total))),
        Progress::Explore { done, total, .. } => Some((u64::from(*done), u64::from(*total))),
        Progress::Campaign { fuzzed, seeds, bugs: None, .. } => Some((u64::from(*fuzzed), u64::from(*seeds))),
        Progress::Campaign { minimized, bugs: Some(b), .. } => Some((u64::from(*minimized), u64::from(*b))),
        Progress::Minimize { .. } | Progress::Done => None,
    }
}

/// One line describing `p`, for bars' messages and for logs.
pub fn describe(p: &Progress) -> String {
    match p {
        Progress::Handshakes { done, total } => format!("handshakes: {done}/{total} switch connections"),
        Progress::Pings { done, total } => format!("pings: {done}/{total} host pairs"),
        Progress::Fuzz { step, steps, inputs, last, clock_ms } => {
            let last = last.as_deref().map(|l| format!(", last {l}")).unwrap_or_default();
            format!(
                "fuzzing: step {step}/{steps}, {inputs} inputs, {:.1} s of run time{last}",
                *clock_ms as f64 / 1000.0
            )
        }
        Progress::Replay { run, of } => format!("replaying: run {run} of {of}"),
        Progress::Minimize { inputs_left, original, trying, candidate_inputs, tested, replays, elapsed_s } => {
            format!(
                "minimizing: {inputs_left} of {original} inputs left; trying {trying} candidate(s) of {candidate_inputs} inputs; {tested} tested, {replays} replays, {elapsed_s:.0} s{}",
                eta(*original, *inputs_left, *elapsed_s).map(|s| format!(", ETA ~{s:.0} s")).unwrap_or_default()
            )
        }
        Progress::FinalReplays { done, total } => format!("final replays: {done}/{total}"),
        Progress::Explore { done, total, finds } => format!("explore: {done}/{total} orders tried, {finds} found"),
        Progress::Campaign { fuzzed, seeds, found, distinct, bugs: None, .. } => {
            format!(
                "campaign: {fuzzed}/{seeds} seeds fuzzed, {found} found a violation, {distinct} distinct bug(s) so far"
            )
        }
        Progress::Campaign { minimized, bugs: Some(b), .. } => {
            format!("campaign: minimizing bug {} of {b}", minimized + 1)
        }
        Progress::Done => String::new(),
    }
}

/// A rough time left for delta debugging: it tends to halve the sequence at
/// a steady pace, so the halvings still to come cost what the past ones did.
/// None until a first reduction gives a pace.
fn eta(original: usize, left: usize, elapsed_s: f64) -> Option<f64> {
    if left >= original || left < 2 || original < 2 {
        return None;
    }
    let done = (original as f64 / left as f64).log2();
    let to_go = (left as f64).log2() + 1.0;
    Some(elapsed_s / done * to_go)
}

impl Terminal {
    /// Clears whatever bar is left (a job that ended in an error).
    pub fn finish(&self) {
        self.progress(&Progress::Done);
    }
}

impl Observer for Terminal {
    fn progress(&self, p: &Progress) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let name = phase(p);
        if is_outer(name) {
            st.outer = Some(name);
        }
        // A session's handshakes inside a job: the job's own line stays.
        if matches!(p, Progress::Handshakes { .. }) && st.outer.is_some() {
            return;
        }
        if self.json {
            if *p == Progress::Done {
                st.outer = None;
            }
            eprintln!("{}", serde_json::json!({ "progress": p }));
            return;
        }
        if *p == Progress::Done {
            st.outer = None;
            if let Some((_, bar)) = st.bar.take() {
                bar.finish_and_clear();
            }
            return;
        }
        if !self.tty {
            if st.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY) {
                st.last_line = Some(Instant::now());
                eprintln!("sts: {}", describe(p));
            }
            return;
        }
        if st.bar.as_ref().is_none_or(|(n, _)| *n != name) {
            if let Some((_, old)) = st.bar.take() {
                old.finish_and_clear();
            }
            let bar = match counts(p) {
                Some((_, len)) => ProgressBar::new(len).with_style(
                    ProgressStyle::with_template("{spinner} {msg} [{pos}/{len}] {elapsed}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::new_spinner().with_style(
                    ProgressStyle::with_template("{spinner} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                ),
            };
            bar.enable_steady_tick(Duration::from_millis(120));
            st.bar = Some((name, bar));
        }
        if let Some((_, bar)) = &st.bar {
            if let Some((pos, _)) = counts(p) {
                bar.set_position(pos);
            }
            bar.set_message(match p {
                Progress::Fuzz { .. }
                | Progress::Minimize { .. }
                | Progress::Campaign { .. }
                | Progress::Explore { .. } => describe(p),
                _ => name.to_string(),
            });
        }
    }

    fn notice(&self, n: &Notice) {
        if self.json {
            eprintln!("{}", serde_json::json!({ "notice": n }));
            return;
        }
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &st.bar {
            Some((_, bar)) => bar.suspend(|| eprintln!("sts: {}", n.message)),
            None => eprintln!("sts: {}", n.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_follows_the_pace_of_halvings() {
        assert_eq!(eta(64, 64, 10.0), None, "no reduction yet");
        // 64 -> 16 is two halvings in 20 s; 16 -> 1 is four more plus the last round.
        assert_eq!(eta(64, 16, 20.0), Some(50.0));
        assert_eq!(eta(64, 1, 20.0), None);
    }

    #[test]
    fn lines_say_where_a_job_is() {
        let p = Progress::Minimize {
            inputs_left: 16,
            original: 64,
            trying: 2,
            candidate_inputs: 8,
            tested: 5,
            replays: 9,
            elapsed_s: 20.0,
        };
        assert_eq!(
            describe(&p),
            "minimizing: 16 of 64 inputs left; trying 2 candidate(s) of 8 inputs; 5 tested, 9 replays, 20 s, ETA ~50 s"
        );
        let f = Progress::Fuzz { step: 3, steps: 10, inputs: 4, last: Some("ping h1 -> h2".into()), clock_ms: 1500 };
        assert_eq!(describe(&f), "fuzzing: step 3/10, 4 inputs, 1.5 s of run time, last ping h1 -> h2");
    }
}
