//! When the kubelet restarts the wrapped container in place, and so when
//! meshwrap must leave the sidecar running for the restarted command.
//!
//! The container's own `restartPolicy` (KEP-5307, beta in 1.35) overrides
//! the pod's, and its `restartPolicyRules` restart it on listed exit codes
//! whatever either policy says: the rules are read in order and the first
//! that matches an exit code decides. A quit policy drawn from the pod's
//! `restartPolicy` alone would quit the sidecar under a container that is
//! about to run again, which then has no network. So the set of exit codes
//! that restart the container is worked out whole, and becomes a quit
//! policy plus, where it is neither none, every failure nor everything,
//! meshwrap's `--no-quit-on-exit` list.

use serde_json::Value;

/// Exit codes 0 to 255: which of them restart the container.
pub type Restarts = [bool; 256];

/// The exit codes on which the kubelet restarts `container`, whose
/// inherited policy (the pod's, or a replica's) is `inherited`; or why it
/// cannot be told.
pub fn restarts(container: &Value, inherited: &str) -> Result<Restarts, String> {
    let own = container.get("restartPolicy").and_then(Value::as_str);
    let policy = own.unwrap_or(inherited);
    let restarts_on = |code: usize| match policy {
        "Always" => Some(true),
        "OnFailure" => Some(code != 0),
        "Never" => Some(false),
        _ => None,
    };
    if restarts_on(0).is_none() {
        let whose = if own.is_some() {
            "its restartPolicy"
        } else {
            "the restartPolicy it inherits"
        };
        return Err(format!("{whose} \"{policy}\" is not Always, OnFailure or Never"));
    }
    let mut set = [false; 256];
    for (code, restarts) in set.iter_mut().enumerate() {
        *restarts = restarts_on(code).unwrap_or(false);
    }
    let rules = container.get("restartPolicyRules").and_then(Value::as_array);
    // Later rules first, so that an earlier rule's verdict is the one left.
    for (n, rule) in rules
        .into_iter()
        .flatten()
        .enumerate()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        let (codes, restart) = rule_codes(rule).map_err(|why| format!("restartPolicyRules[{n}]: {why}"))?;
        for (code, restarts) in set.iter_mut().enumerate() {
            if codes[code] {
                *restarts = restart;
            }
        }
    }
    Ok(set)
}

/// The codes one rule matches, and whether it restarts on them.
fn rule_codes(rule: &Value) -> Result<(Restarts, bool), String> {
    let restart = match rule.get("action").and_then(Value::as_str) {
        Some("Restart" | "RestartAllContainers") => true,
        Some(other) => {
            return Err(format!(
                "action {other:?} is not one meshwrap knows (Restart, RestartAllContainers)"
            ));
        }
        None => return Err("no action".into()),
    };
    let exit = rule.get("exitCodes").ok_or("no exitCodes")?;
    let values: Vec<i64> = exit
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    let inside = match exit.get("operator").and_then(Value::as_str) {
        Some("In") => true,
        Some("NotIn") => false,
        other => return Err(format!("exitCodes.operator {other:?} is not In or NotIn")),
    };
    let mut codes = [false; 256];
    for (code, matched) in codes.iter_mut().enumerate() {
        *matched = values.contains(&(code as i64)) == inside;
    }
    Ok((codes, restart))
}

/// The quit policy these restarts call for, and the exit codes meshwrap
/// must not quit on beyond what that policy already says.
pub fn quit_policy(set: &Restarts) -> (&'static str, Vec<(u8, u8)>) {
    if set.iter().all(|&r| r) {
        ("never", Vec::new())
    } else if !set[0] && set[1..].iter().all(|&r| r) {
        ("on-success", Vec::new())
    } else {
        ("always", ranges(set))
    }
}

/// The codes that restart, as inclusive ranges.
pub fn ranges(set: &Restarts) -> Vec<(u8, u8)> {
    let mut out: Vec<(u8, u8)> = Vec::new();
    for code in (0..=255u8).filter(|&c| set[usize::from(c)]) {
        match out.last_mut() {
            Some((_, high)) if *high + 1 == code => *high = code,
            _ => out.push((code, code)),
        }
    }
    out
}

/// `42,43,100-120`, as meshwrap's `--no-quit-on-exit` takes it.
pub fn flag(ranges: &[(u8, u8)]) -> String {
    let items: Vec<String> = ranges
        .iter()
        .map(|&(low, high)| {
            if low == high {
                low.to_string()
            } else {
                format!("{low}-{high}")
            }
        })
        .collect();
    items.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn derived(container: Value, inherited: &str) -> (&'static str, String) {
        let (policy, codes) = quit_policy(&restarts(&container, inherited).unwrap());
        (policy, flag(&codes))
    }

    #[test]
    fn the_containers_policy_overrides_the_pods() {
        assert_eq!(derived(json!({}), "OnFailure"), ("on-success", "".into()));
        assert_eq!(
            derived(json!({"restartPolicy": "Never"}), "OnFailure"),
            ("always", "".into())
        );
        assert_eq!(
            derived(json!({"restartPolicy": "OnFailure"}), "Never"),
            ("on-success", "".into())
        );
        assert_eq!(
            derived(json!({"restartPolicy": "Always"}), "Never"),
            ("never", "".into())
        );
    }

    #[test]
    fn rules_restart_on_listed_codes_first_match_wins() {
        let rule =
            |op: &str, values: Value| json!({"action": "Restart", "exitCodes": {"operator": op, "values": values}});
        let in_42 = json!({"restartPolicy": "Never", "restartPolicyRules": [rule("In", json!([42, 43, 45]))]});
        assert_eq!(derived(in_42, "Never"), ("always", "42-43,45".into()));
        let not_in = json!({"restartPolicy": "Never", "restartPolicyRules": [rule("NotIn", json!([0, 1]))]});
        assert_eq!(derived(not_in, "Never"), ("always", "2-255".into()));
        let not_in_zero = json!({"restartPolicy": "Never", "restartPolicyRules": [rule("NotIn", json!([0]))]});
        assert_eq!(derived(not_in_zero, "Never"), ("on-success", "".into()));
        // The first rule that matches decides: 42 restarts, though the second says otherwise.
        let ordered = json!({"restartPolicy": "Never", "restartPolicyRules": [
            rule("In", json!([42])),
            {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [42]}}
        ]});
        assert_eq!(derived(ordered, "Never"), ("never", "".into()));
    }

    #[test]
    fn a_restart_policy_that_is_not_always_on_failure_or_never_is_refused_with_the_value() {
        let e = restarts(&json!({"restartPolicy": "Sometimes"}), "Never").unwrap_err();
        assert_eq!(e, "its restartPolicy \"Sometimes\" is not Always, OnFailure or Never");
        let e = restarts(&json!({}), "onFailure").unwrap_err();
        assert_eq!(
            e,
            "the restartPolicy it inherits \"onFailure\" is not Always, OnFailure or Never"
        );
    }

    #[test]
    fn rules_meshwrap_cannot_read_are_refused_with_the_reason() {
        for (rule, why) in [
            (
                json!({"action": "Pause", "exitCodes": {"operator": "In", "values": [1]}}),
                "Pause",
            ),
            (json!({"action": "Restart"}), "no exitCodes"),
            (
                json!({"action": "Restart", "exitCodes": {"operator": "Maybe"}}),
                "Maybe",
            ),
        ] {
            let e = restarts(
                &json!({"restartPolicy": "Never", "restartPolicyRules": [rule]}),
                "Never",
            )
            .unwrap_err();
            assert!(e.starts_with("restartPolicyRules[0]: ") && e.contains(why), "{e}");
        }
    }
}
