//! Reading what older versions of sts wrote.
//!
//! Up to trace version 2, a fingerprint's JSON was the codec's serde form:
//! the message wrapped in its Rust enum variants (`{"V13":{"FlowMod":{...}}}`)
//! and nested variants in Rust's spelling (`"ApplyActions"`, `"PopVlan"`,
//! `"PortDesc"`), so renaming a variant in the codec would have silently
//! stopped replays from matching old traces. From version 3 a fingerprint is
//! the message's fields under the type the prefix already names
//! (`of4/flow_mod {"cookie":"*",...}`), with every variant in the spec's
//! snake_case (`apply_actions`, `pop_vlan`, `port_desc`); a unit message is
//! `{}`. Learned masks (`masks.json`) hold paths into that JSON and change the
//! same way (`V13.FlowMod.hard_timeout` is now `hard_timeout`).
//!
//! The upgrade is a pass over the text, not a parse and re-serialization, so
//! the fields keep their order and the result is byte for byte what this sts
//! computes for the same message. It is idempotent.

/// The outer wrappers of a version-2 fingerprint: a version's message enum
/// (two levels: version, then message) or a body outside the versions (one).
const VERSION_WRAPPERS: [&str; 2] = ["{\"V10\":", "{\"V13\":"];
const BODY_WRAPPERS: [&str; 2] = ["{\"Hello\":", "{\"Raw\":"];

/// A fingerprint as this sts writes it, from one an older sts wrote
/// (`of4/flow_mod {"V13":{"FlowMod":{...}}}` → `of4/flow_mod {...}`).
/// Fingerprints already current come back unchanged.
pub fn upgrade_fingerprint(fp: &str) -> String {
    let Some((kind, json)) = fp.split_once(' ') else { return fp.to_string() };
    let body = if let Some(inner) = VERSION_WRAPPERS.iter().find_map(|w| unwrap(json, w)) {
        // `{"FlowMod":{...}}`, or `"FeaturesRequest"` for a message without fields.
        if inner.starts_with('"') {
            "{}"
        } else {
            inner
                .strip_prefix('{')
                .and_then(|i| i.split_once(':'))
                .and_then(|(_, rest)| rest.strip_suffix('}'))
                .unwrap_or(inner)
        }
    } else if let Some(inner) = BODY_WRAPPERS.iter().find_map(|w| unwrap(json, w)) {
        inner
    } else {
        json
    };
    format!("{kind} {}", snake_case_names(body))
}

/// A learned mask's path as this sts writes it (`V13.FlowMod.instructions.0.
/// ApplyActions.1.Output.port` → `instructions.0.apply_actions.1.output.port`).
pub fn upgrade_mask_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('.').collect();
    let skip = match parts.first() {
        Some(&"V10") | Some(&"V13") => 2,
        Some(&"Hello") | Some(&"Raw") => 1,
        _ => 0,
    };
    parts
        .iter()
        .skip(skip)
        .map(|p| if is_variant_name(p) { snake_case(p) } else { p.to_string() })
        .collect::<Vec<_>>()
        .join(".")
}

/// `json` without the one-key object `wrapper` ... `}` around it.
fn unwrap<'a>(json: &'a str, wrapper: &str) -> Option<&'a str> {
    json.strip_prefix(wrapper)?.strip_suffix('}')
}

/// A Rust variant's spelling: an upper-case letter, then letters and digits.
fn is_variant_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// `ApplyActions` → `apply_actions`, as serde's `rename_all = "snake_case"`
/// spells it.
fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Compact JSON with every string that is spelled like a Rust variant (a
/// key, or a unit variant's value) in snake_case; everything else copied.
fn snake_case_names(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(start) = rest.find('"') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        // The string's end: the next quote not escaped.
        let mut end = None;
        let mut escaped = false;
        for (i, c) in after.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(end) = end else {
            out.push_str(&rest[start..]);
            return out;
        };
        let text = &after[..end];
        out.push('"');
        if is_variant_name(text) {
            out.push_str(&snake_case(text));
        } else {
            out.push_str(text);
        }
        out.push('"');
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_go_and_variants_take_the_specs_spelling() {
        let old = r#"of4/flow_mod {"V13":{"FlowMod":{"priority":1,"instructions":[{"ApplyActions":["PopVlan",{"Output":{"port":1}}]}]}}}"#;
        let new =
            r#"of4/flow_mod {"priority":1,"instructions":[{"apply_actions":["pop_vlan",{"output":{"port":1}}]}]}"#;
        assert_eq!(upgrade_fingerprint(old), new);
        assert_eq!(upgrade_fingerprint(new), new, "idempotent");
        assert_eq!(upgrade_fingerprint(r#"of4/features_request {"V13":"FeaturesRequest"}"#), "of4/features_request {}");
        assert_eq!(
            upgrade_fingerprint(r#"of6/hello {"Hello":{"version":6,"hello":{"elements":[]}}}"#),
            r#"of6/hello {"version":6,"hello":{"elements":[]}}"#
        );
        assert_eq!(upgrade_fingerprint(r#"of4/echo_request "*""#), r#"of4/echo_request "*""#);
        // Strings that are not variant names stay as they are, escapes included.
        let odd = r#"of4/port_status {"V13":{"PortStatus":{"name":"s1-eth1","x":"a\"B","mac":"00:00:00:00:00:02"}}}"#;
        assert_eq!(
            upgrade_fingerprint(odd),
            r#"of4/port_status {"name":"s1-eth1","x":"a\"B","mac":"00:00:00:00:00:02"}"#
        );
    }

    #[test]
    fn mask_paths_lose_the_wrappers() {
        assert_eq!(upgrade_mask_path("V13.FlowMod.hard_timeout"), "hard_timeout");
        assert_eq!(upgrade_mask_path("V10.PacketOut.actions.0.Output.port"), "actions.0.output.port");
        assert_eq!(upgrade_mask_path("hard_timeout"), "hard_timeout");
    }
}
