//! Standalone proxies managed over the API (Toxiproxy-style, OpenFlow-aware):
//! `sts proxy` instances between real switches and a controller, whose fault
//! policy (drop, delay with jitter, hold, bandwidth; by message type, connection,
//! datapath id and direction; each rule with a probability, switched on or
//! off, added, replaced and removed on its own by name) changes while they
//! run, each recording every message to `DATA/proxies/NAME.jsonl`.
//!
//! Proxies live in the server's memory: a restart ends them (their
//! recordings stay), as a restart of Toxiproxy does.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use sts_client::{MessageDirection, PolicyRule, ProxyInfo, ProxyRequest, RuleAction};
use sts_proxy::interpose::{Action, Direction, Rule};
use sts_proxy::standalone::{self, Control};

/// Most proxies one server runs.
pub const MAX_PROXIES: usize = 256;

/// Why a proxy request cannot be done.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("{0}")]
    Bad(String),
    #[error("no proxy named {0:?}")]
    NotFound(String),
    #[error("proxy {0:?} has no rule named {1:?}")]
    NoRule(String, String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Io(String),
}

struct Running {
    request: ProxyRequest,
    seed: u64,
    listen: SocketAddr,
    control: Control,
    task: tokio::task::JoinHandle<()>,
    recorder: Option<standalone::RecorderHandle>,
}

/// The server's proxies, by name.
pub struct Proxies {
    dir: PathBuf,
    running: Mutex<BTreeMap<String, Running>>,
    clock: sts_engine::clock::Clock,
}

fn rule_of(r: &PolicyRule) -> Result<Rule, ProxyError> {
    let bad = |s: String| Err(ProxyError::Bad(s));
    if let Some(name) = &r.name {
        check_rule_name(name)?;
    }
    if let Some(t) = &r.msg_type {
        let known = sts_proxy::wire::type_names();
        if !known.contains(&t.as_str()) {
            return bad(format!("unknown message type {t:?} (known: {})", known.join(", ")));
        }
    }
    if let Some(p) = r.probability {
        if !(0.0..=1.0).contains(&p) {
            return bad(format!("probability {p}: from 0 to 1"));
        }
    }
    let action = match (r.action, r.ms) {
        (RuleAction::Delay, Some(ms)) if ms <= 3_600_000 => Action::Delay(ms),
        (RuleAction::Delay, Some(_)) => return bad("a delay is at most 3,600,000 ms".into()),
        (RuleAction::Delay, None) => return bad("a delay rule needs `ms`".into()),
        (_, Some(_)) => return bad("`ms` belongs to delay rules".into()),
        (RuleAction::Bandwidth, None) => match r.rate {
            Some(kb) if (1..=1_000_000_000).contains(&kb) => Action::Bandwidth(kb * 1000),
            Some(kb) => return bad(format!("rate {kb}: from 1 to 1,000,000,000 KB/s")),
            None => return bad("a bandwidth rule needs `rate` (KB/s)".into()),
        },
        (RuleAction::Pass, None) => Action::Pass,
        (RuleAction::Drop, None) => Action::Drop,
        (RuleAction::Hold, None) => Action::Hold,
    };
    if r.rate.is_some() && r.action != RuleAction::Bandwidth {
        return bad("`rate` belongs to bandwidth rules".into());
    }
    let jitter_ms = match (r.action, r.jitter_ms) {
        (RuleAction::Delay, Some(j)) if j <= 3_600_000 => j,
        (RuleAction::Delay, Some(_)) => return bad("a jitter is at most 3,600,000 ms".into()),
        (_, Some(_)) => return bad("`jitter_ms` belongs to delay rules".into()),
        (_, None) => 0,
    };
    Ok(Rule {
        dir: r.direction.map(|d| match d {
            MessageDirection::ToController => Direction::SwitchToController,
            MessageDirection::ToSwitch => Direction::ControllerToSwitch,
        }),
        dpid: r.switch,
        msg_type: r.msg_type.clone(),
        action,
        datapath: r.datapath_id,
        chance: r.probability,
        jitter_ms,
    })
}

/// The rules of `rules` in force: each checked, the ones switched off left
/// out; rule names unique.
fn rules_of(rules: &[PolicyRule]) -> Result<Vec<Rule>, ProxyError> {
    if rules.len() > 1000 {
        return Err(ProxyError::Bad("at most 1,000 rules".into()));
    }
    let mut names = std::collections::BTreeSet::new();
    for n in rules.iter().filter_map(|r| r.name.as_deref()) {
        if !names.insert(n) {
            return Err(ProxyError::Bad(format!("two rules are named {n:?}")));
        }
    }
    let compiled = rules.iter().map(rule_of).collect::<Result<Vec<Rule>, ProxyError>>()?;
    Ok(compiled.into_iter().zip(rules).filter(|(_, r)| r.is_enabled()).map(|(c, _)| c).collect())
}

fn check_rule_name(name: &str) -> Result<(), ProxyError> {
    check_name_of("rule", name)
}

fn check_name(name: &str) -> Result<(), ProxyError> {
    check_name_of("proxy", name)
}

/// A proxy's or rule's name: 1 to 64 letters, digits, `-` or `_` (it is a
/// file name and a path segment).
fn check_name_of(what: &str, name: &str) -> Result<(), ProxyError> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ProxyError::Bad(format!("{what} name {name:?}: 1 to 64 letters, digits, `-` or `_`")))
    }
}

fn addr(what: &str, s: &str) -> Result<SocketAddr, ProxyError> {
    s.parse().map_err(|_| ProxyError::Bad(format!("`{what}` {s:?} is not an address (IP:PORT)")))
}

impl Proxies {
    /// No proxies yet; recordings go to `dir`.
    pub fn new(dir: PathBuf) -> Proxies {
        Proxies { dir, running: Mutex::new(BTreeMap::new()), clock: sts_engine::clock::Clock::start() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn info(name: &str, r: &Running) -> ProxyInfo {
        let stats = r.control.stats();
        ProxyInfo {
            name: name.to_string(),
            listen: r.listen.to_string(),
            controller: r.request.controller.clone(),
            rules: r.request.rules.clone(),
            switches: stats.switches,
            messages: stats.messages,
            queued: stats.queued,
            recorded: stats.recorded,
            seed: r.seed,
            datapath_ids: stats.datapath_ids,
        }
    }

    /// Where proxy `name` records.
    pub fn recording(&self, name: &str) -> Result<PathBuf, ProxyError> {
        check_name(name)?;
        let path = self.dir.join(format!("{name}.jsonl"));
        if !self.lock().contains_key(name) && !path.is_file() {
            return Err(ProxyError::NotFound(name.to_string()));
        }
        Ok(path)
    }

    /// Every proxy, by name.
    pub fn list(&self) -> Vec<ProxyInfo> {
        self.lock().iter().map(|(n, r)| Proxies::info(n, r)).collect()
    }

    /// Proxy `name`.
    pub fn get(&self, name: &str) -> Result<ProxyInfo, ProxyError> {
        let running = self.lock();
        let r = running.get(name).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        Ok(Proxies::info(name, r))
    }

    /// Starts a proxy.
    pub async fn create(&self, req: ProxyRequest) -> Result<ProxyInfo, ProxyError> {
        check_name(&req.name)?;
        let listen = addr("listen", &req.listen)?;
        let controller = addr("controller", &req.controller)?;
        let rules = rules_of(&req.rules)?;
        {
            let running = self.lock();
            if running.contains_key(&req.name) {
                return Err(ProxyError::Conflict(format!("a proxy named {:?} exists: delete it first", req.name)));
            }
            if running.len() >= MAX_PROXIES {
                return Err(ProxyError::Conflict(format!("{MAX_PROXIES} proxies run already")));
            }
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| ProxyError::Io(format!("{}: {e}", self.dir.display())))?;
        let path = self.dir.join(format!("{}.jsonl", req.name));
        // A proxy of the same name recorded before: its recording is kept, aside.
        if path.exists() {
            let aside = self.dir.join(format!("{}.{}.jsonl", req.name, sts_engine::clock::unix_time_ms()));
            std::fs::rename(&path, &aside).map_err(|e| ProxyError::Io(format!("{}: {e}", path.display())))?;
        }
        let (recording, recorder) =
            standalone::record_to(&path).map_err(|e| ProxyError::Io(format!("{}: {e}", path.display())))?;
        let now = self.clock.now_fn();
        let mut proxy = standalone::Proxy::bind(listen, controller, Some(recording), rules, 1000, now)
            .await
            .map_err(|e| ProxyError::Conflict(format!("cannot listen on {listen}: {e}")))?;
        let control = proxy.control();
        let seed = req.seed.unwrap_or_else(|| sts_engine::clock::unix_time_ms().unsigned_abs());
        control.seed(seed);
        let bound = proxy.local_addr();
        let name = req.name.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = proxy.serve().await {
                tracing::warn!("proxy {name}: {e}");
            }
        });
        let running = Running { request: req, seed, listen: bound, control, task, recorder: Some(recorder) };
        let info = Proxies::info(&running.request.name, &running);
        let mut all = self.lock();
        if all.contains_key(&info.name) {
            // Created by another request in the meantime.
            running.task.abort();
            return Err(ProxyError::Conflict(format!("a proxy named {:?} exists: delete it first", info.name)));
        }
        all.insert(info.name.clone(), running);
        Ok(info)
    }

    /// Replaces proxy `name`'s fault policy.
    pub fn set_fault_rules(&self, name: &str, rules: Vec<PolicyRule>) -> Result<ProxyInfo, ProxyError> {
        let compiled = rules_of(&rules)?;
        let mut running = self.lock();
        let r = running.get_mut(name).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        r.control.set_fault_rules(compiled);
        r.request.rules = rules;
        Ok(Proxies::info(name, r))
    }

    /// Changes proxy `name`'s rules with `edit` (given them and the proxy's
    /// name); the result is checked and put in force, or nothing changes.
    fn edit_rules(
        &self,
        name: &str,
        edit: impl FnOnce(&mut Vec<PolicyRule>) -> Result<(), ProxyError>,
    ) -> Result<ProxyInfo, ProxyError> {
        let mut running = self.lock();
        let r = running.get_mut(name).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        let mut rules = r.request.rules.clone();
        edit(&mut rules)?;
        r.control.set_fault_rules(rules_of(&rules)?);
        r.request.rules = rules;
        Ok(Proxies::info(name, r))
    }

    /// Adds `rule` (named) at the end of proxy `name`'s policy.
    pub fn add_rule(&self, name: &str, rule: PolicyRule) -> Result<ProxyInfo, ProxyError> {
        let Some(rule_name) = rule.name.clone() else {
            return Err(ProxyError::Bad("a rule added on its own needs a `name`".into()));
        };
        self.edit_rules(name, |rules| {
            if rules.iter().any(|r| r.name.as_deref() == Some(rule_name.as_str())) {
                return Err(ProxyError::Conflict(format!("proxy {name:?} has a rule named {rule_name:?}")));
            }
            rules.push(rule);
            Ok(())
        })
    }

    /// Rule `rule` of proxy `name`.
    pub fn rule(&self, name: &str, rule: &str) -> Result<PolicyRule, ProxyError> {
        let running = self.lock();
        let r = running.get(name).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        let found = r.request.rules.iter().find(|r| r.name.as_deref() == Some(rule));
        found.cloned().ok_or_else(|| ProxyError::NoRule(name.to_string(), rule.to_string()))
    }

    /// Replaces rule `rule` of proxy `name` with `with`, in its place (its
    /// name kept when `with` has none).
    pub fn replace_rule(&self, name: &str, rule: &str, mut with: PolicyRule) -> Result<ProxyInfo, ProxyError> {
        if with.name.as_deref().is_some_and(|n| n != rule) {
            return Err(ProxyError::Bad(format!("the rule sent is named {:?}, not {rule:?}", with.name)));
        }
        with.name = Some(rule.to_string());
        self.edit_rules(name, |rules| {
            let at = rules.iter().position(|r| r.name.as_deref() == Some(rule));
            let at = at.ok_or_else(|| ProxyError::NoRule(name.to_string(), rule.to_string()))?;
            rules[at] = with;
            Ok(())
        })
    }

    /// Removes rule `rule` of proxy `name`.
    pub fn delete_rule(&self, name: &str, rule: &str) -> Result<ProxyInfo, ProxyError> {
        self.edit_rules(name, |rules| {
            let at = rules.iter().position(|r| r.name.as_deref() == Some(rule));
            let at = at.ok_or_else(|| ProxyError::NoRule(name.to_string(), rule.to_string()))?;
            rules.remove(at);
            Ok(())
        })
    }

    /// Sends proxy `name`'s held messages on; how many went.
    pub async fn release(&self, name: &str) -> Result<usize, ProxyError> {
        let control =
            self.lock().get(name).map(|r| r.control.clone()).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        Ok(control.release().await)
    }

    /// Stops proxy `name` (its connections end; its recording is finished
    /// and kept).
    pub async fn delete(&self, name: &str) -> Result<(), ProxyError> {
        let mut r = self.lock().remove(name).ok_or_else(|| ProxyError::NotFound(name.to_string()))?;
        r.task.abort();
        let _ = (&mut r.task).await;
        drop(r.control); // the last handle on the recording, with the task's
        if let Some(h) = r.recorder.take() {
            tokio::task::spawn_blocking(move || h.finish()).await.ok();
        }
        Ok(())
    }

    /// Creates the proxies of `requests` that do not run, replaces those
    /// whose addresses changed, and updates the policy of the others; the
    /// same call twice does nothing the second time. Proxies not named stay.
    pub async fn populate(&self, requests: Vec<ProxyRequest>) -> Result<Vec<ProxyInfo>, ProxyError> {
        for r in &requests {
            check_name(&r.name)?;
            addr("listen", &r.listen)?;
            addr("controller", &r.controller)?;
            rules_of(&r.rules)?;
        }
        let mut out = Vec::new();
        for req in requests {
            let same = self.lock().get(&req.name).map(|r| {
                let listen_same = r.request.listen == req.listen || addr("", &req.listen).is_ok_and(|a| a == r.listen);
                listen_same && r.request.controller == req.controller
            });
            match same {
                Some(true) => out.push(self.set_fault_rules(&req.name, req.rules)?),
                Some(false) => {
                    self.delete(&req.name).await?;
                    out.push(self.create(req).await?);
                }
                None => out.push(self.create(req).await?),
            }
        }
        Ok(out)
    }

    /// Stops every proxy (`POST /reset`).
    pub async fn clear(&self) {
        let names: Vec<String> = self.lock().keys().cloned().collect();
        for n in names {
            let _ = self.delete(&n).await;
        }
    }
}
