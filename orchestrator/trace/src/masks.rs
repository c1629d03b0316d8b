//! Learned fingerprint masks (`sts learn`, `DIR/masks.json`).
//!
//! A fingerprint masks by hand the fields known to vary between equivalent
//! runs (xids, cookies, buffer ids, counters: `sts_proxy::wire::fingerprint`).
//! A controller may put volatile values elsewhere (a nonce in a timeout, a
//! timestamp in a payload): its replays then miss events that did happen.
//! `sts learn` replays a trace several times, finds the fields that differ
//! between runs in messages that are otherwise the same, and saves them here,
//! per message type, as paths into the fingerprint's JSON (`hard_timeout`,
//! `instructions.0.apply_actions.1.output.port`); replay masks them too when
//! it matches events. Paths an older sts wrote (`V13.FlowMod.hard_timeout`)
//! are upgraded as they load ([`crate::legacy`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Internal;

/// Per message type (`flow_mod`), the fingerprint paths to mask.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Masks {
    pub by_type: BTreeMap<String, BTreeSet<String>>,
}

/// Where an experiment keeps its learned masks.
pub fn path(dir: &Path) -> PathBuf {
    dir.join("masks.json")
}

/// The value a masked field takes.
const MASKED: &str = "*";

/// The leaves of a fingerprint's JSON (`of4/flow_mod {...}`), by path
/// (object keys and array indices joined with dots); `None` for a
/// fingerprint that is not JSON after its type.
pub fn leaves(fp: &str) -> Option<BTreeMap<String, Value>> {
    let (_, json) = fp.split_once(' ')?;
    let v: Value = serde_json::from_str(json).ok()?;
    let mut out = BTreeMap::new();
    walk(&v, String::new(), &mut out);
    Some(out)
}

fn walk(v: &Value, at: String, out: &mut BTreeMap<String, Value>) {
    let join = |k: &str| if at.is_empty() { k.to_string() } else { format!("{at}.{k}") };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, x)| walk(x, join(k), out)),
        Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, join(&i.to_string()), out)),
        leaf => {
            out.insert(at, leaf.clone());
        }
    }
}

fn mask_in(v: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        *v = Value::String(MASKED.into());
        return;
    };
    let next = match v {
        Value::Object(m) => m.get_mut(*first),
        Value::Array(a) => first.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
        _ => None,
    };
    if let Some(n) = next {
        mask_in(n, rest);
    }
}

impl Masks {
    /// The masks saved in `dir`, if any; an error names the file.
    pub fn load(dir: &Path) -> Result<Option<Masks>, String> {
        let p = path(dir);
        match std::fs::read_to_string(&p) {
            Ok(text) => {
                let masks: Masks = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
                Ok(Some(masks.upgraded()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", p.display())),
        }
    }

    /// Paths an older sts wrote (`V13.FlowMod.hard_timeout`) in this
    /// version's spelling (`hard_timeout`, [`crate::legacy`]).
    fn upgraded(self) -> Masks {
        let by_type = self
            .by_type
            .into_iter()
            .map(|(kind, paths)| (kind, paths.iter().map(|p| crate::legacy::upgrade_mask_path(p)).collect()))
            .collect();
        Masks { by_type }
    }

    /// Saves them into `dir` (atomically).
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        crate::dir::write_json(&path(dir), self)
    }

    pub fn is_empty(&self) -> bool {
        self.by_type.values().all(BTreeSet::is_empty)
    }

    /// `fp` with the paths learned for `msg_type` masked (unchanged when
    /// none are).
    pub fn apply(&self, msg_type: &str, fp: &str) -> String {
        let Some(paths) = self.by_type.get(msg_type).filter(|p| !p.is_empty()) else { return fp.to_string() };
        let Some((head, json)) = fp.split_once(' ') else { return fp.to_string() };
        let Ok(mut v) = serde_json::from_str::<Value>(json) else { return fp.to_string() };
        for p in paths {
            mask_in(&mut v, &p.split('.').collect::<Vec<_>>());
        }
        format!("{head} {v}")
    }

    /// What replay matches `i` on ([`Internal::key`]), with these masks.
    pub fn key(&self, i: &Internal) -> Option<String> {
        match i {
            Internal::Openflow { dpid, controller, dir, msg, fp, .. } if self.by_type.contains_key(msg.as_str()) => {
                Some(format!("of {dpid} {controller} {} {}", dir.as_str(), self.apply(msg.as_str(), &fp.0)))
            }
            _ => i.key(),
        }
    }
}

/// What replay matches `i` on: [`Masks::key`] when an experiment has
/// masks, else [`Internal::key`].
pub fn key(masks: Option<&Masks>, i: &Internal) -> Option<String> {
    match masks {
        Some(m) => m.key(i),
        None => i.key(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_learned_path_is_masked_and_nothing_else() {
        let fp = r#"of4/flow_mod {"priority":1,"hard_timeout":1234,"actions":[{"port":2}]}"#;
        let l = leaves(fp).unwrap();
        assert_eq!(l["hard_timeout"], 1234);
        assert_eq!(l["actions.0.port"], 2);
        let mut m = Masks::default();
        assert_eq!(m.apply("flow_mod", fp), fp, "no masks: unchanged");
        m.by_type.entry("flow_mod".into()).or_default().insert("hard_timeout".into());
        let other = fp.replace("1234", "999");
        assert_eq!(m.apply("flow_mod", fp), m.apply("flow_mod", &other), "the nonce no longer tells them apart");
        assert_ne!(m.apply("flow_mod", fp), m.apply("flow_mod", &fp.replace(r#""port":2"#, r#""port":3"#)));
        assert_eq!(m.apply("packet_out", fp), fp, "other types untouched");
    }

    #[test]
    fn masks_an_older_sts_saved_load_in_this_spelling() {
        let dir = std::env::temp_dir().join(format!("sts-masks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // As `sts learn` wrote it up to trace version 2.
        let old = r#"{"by_type":{"flow_mod":["V13.FlowMod.hard_timeout","V13.FlowMod.instructions.0.ApplyActions.0.Output.port"]}}"#;
        std::fs::write(path(&dir), old).unwrap();
        let m = Masks::load(&dir).unwrap().unwrap();
        let paths: Vec<&str> = m.by_type["flow_mod"].iter().map(String::as_str).collect();
        assert_eq!(paths, ["hard_timeout", "instructions.0.apply_actions.0.output.port"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
