//! Things done to a controller from outside OpenFlow: its `setup` steps
//! (run once it is ready, again after each restart, in every fresh copy) and
//! the named policy changes of `[[policies]]` (the `policy` input).
//!
//! What they are and how a step is performed live here; a session runs them
//! against its controllers (`Session::run_step`, `Session::set_up`,
//! `Session::apply_policy`).
//!
//! A step is an HTTP request to the controller's REST API or a command. It
//! runs on a blocking thread while the network keeps running (a REST handler
//! may send FLOW_MODs and wait for their replies). On virtual time the clock
//! stands still meanwhile: the operator's request takes no time, and no
//! timer fires early because sts waited for an answer.

use std::collections::BTreeSet;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{PolicyConfig, StepConfig};

/// What a step is run against: the controller's ports, pid and run directory.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub port: u16,
    pub aux_port: u16,
    pub pid: u32,
    pub dir: String,
}

impl Target {
    fn fill(&self, s: &str) -> String {
        s.replace("{port}", &self.port.to_string())
            .replace("{aux_port}", &self.aux_port.to_string())
            .replace("{pid}", &self.pid.to_string())
            .replace("{dir}", &self.dir)
    }
}

/// The message for a policy the config does not declare (`known` are the
/// ones it does).
pub fn unknown(name: &str, known: &[String]) -> crate::InputError {
    crate::InputError::NoPolicy { name: name.to_string(), known: known.to_vec() }
}

/// The host pairs that must not communicate after the policies `applied`
/// (in order) on top of the config's own `base` pairs: each policy's
/// `isolate` pairs added, its `allow` pairs removed.
pub fn isolation<'a>(
    base: &[(String, String)],
    applied: impl IntoIterator<Item = &'a PolicyConfig>,
) -> Vec<(String, String)> {
    let mut pairs: BTreeSet<(String, String)> = base.iter().cloned().collect();
    for p in applied {
        pairs.extend(p.isolate.iter().cloned());
        p.allow.iter().for_each(|a| {
            pairs.remove(a);
        });
    }
    pairs.into_iter().collect()
}

/// Does the step, on a blocking thread, within `timeout`.
pub(crate) fn perform(step: &StepConfig, target: &Target, timeout: Duration) -> Result<(), String> {
    match (&step.http, &step.command) {
        (Some(http), _) => request(http, step.body.as_deref(), target, timeout),
        (_, Some(command)) => run_command(command, target, timeout),
        _ => Err("neither `http` nor `command`".into()),
    }
}

fn request(http: &str, body: Option<&str>, target: &Target, timeout: Duration) -> Result<(), String> {
    let http = target.fill(http);
    let (method, path) = http.split_once(' ').ok_or("no method")?;
    let url = if path.starts_with('/') { format!("http://127.0.0.1:{}{path}", target.aux_port) } else { path.into() };
    let agent = ureq::AgentBuilder::new().timeout(timeout).build();
    let req = agent.request(method, &url);
    let sent = match body {
        Some(b) => req.set("Content-Type", "application/json").send_string(&target.fill(b)),
        None => req.call(),
    };
    match sent {
        Ok(_) => Ok(()),
        Err(ureq::Error::Status(code, resp)) => {
            let text = sts_trace::bounded_message(resp.into_string().unwrap_or_default(), 300);
            Err(format!("HTTP {code} from {url}: {}", text.trim()))
        }
        Err(e) => Err(format!("{url}: {e}")),
    }
}

fn run_command(command: &[String], target: &Target, timeout: Duration) -> Result<(), String> {
    let args: Vec<String> = command.iter().map(|a| target.fill(a)).collect();
    let mut child = Command::new(&args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", args[0]))?;
    let give_up = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            if status.success() {
                return Ok(());
            }
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return Err(format!("{status}: {}", sts_trace::bounded_message(err, 300).trim()));
        }
        if Instant::now() >= give_up {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("killed after {} ms", timeout.as_millis()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, isolate: &[(&str, &str)], allow: &[(&str, &str)]) -> PolicyConfig {
        let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        PolicyConfig { isolate: pairs(isolate), allow: pairs(allow), ..PolicyConfig::named(name, &[]) }
    }

    #[test]
    fn isolation_follows_the_policies_in_order() {
        let base = vec![("h3".to_string(), "h4".to_string())];
        let deny = policy("deny", &[("h1", "h2")], &[]);
        let undo = policy("undo", &[], &[("h1", "h2"), ("h3", "h4")]);
        let p = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(isolation(&base, [&deny]), vec![p("h1", "h2"), p("h3", "h4")]);
        assert_eq!(isolation(&base, [&deny, &undo]), vec![]);
        assert_eq!(isolation(&base, [&undo, &deny]), vec![p("h1", "h2")]);
    }

    #[test]
    fn a_failing_command_says_why() {
        let t = Target { port: 1, aux_port: 2, pid: 3, dir: "/tmp".into() };
        let cmd = |s: &str| vec!["sh".to_string(), "-c".to_string(), s.to_string()];
        assert!(run_command(&cmd("test {port}{aux_port}{pid} = 123"), &t, Duration::from_secs(5)).is_ok());
        let e = run_command(&cmd("echo nope >&2; exit 3"), &t, Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("nope") && e.contains('3'), "{e}");
        // A long message is cut, on a character boundary (byte 300 falls
        // inside a three-byte character here).
        let e = run_command(
            &cmd("printf x >&2; for i in $(seq 400); do printf '€' >&2; done; exit 1"),
            &t,
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(e.contains("characters ...") && e.chars().count() < 400, "{e}");
        let e = run_command(&cmd("sleep 5"), &t, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("killed after 50 ms"), "{e}");
    }
}
