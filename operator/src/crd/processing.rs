//! `spec.processing`: the drop, redact and sample rules the gateway applies to every span
//! (the collector's `processing`, the same rule type: `tracehouse_contract::processing`), and
//! the Secret holding the key of `with: hash`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
pub use tracehouse_contract::processing::Rule;

use super::SecretKeyRef;

/// Drop, redact and sample spans at the gateway, in the order the rules are written. A
/// decision depends only on the span and the rules, so a replayed record gives the same
/// rows and exactly-once holds (docs/processing.md).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessingSpec {
    /// The rules, applied in order; names are unique (they label
    /// `tracehouse_spans_processed_total`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<Rule>,
    /// The key of `redact.with: hash`: values become HMAC-SHA256 under this key (without it,
    /// plain SHA-256, which anyone can reverse for guessable values such as user ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_key: Option<SecretKeyRef>,
}

impl ProcessingSpec {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// `status.processing`: the rules by action (`2 drop, 1 redact, 1 sample`); `None`
    /// without rules.
    pub fn label(&self) -> Option<String> {
        use tracehouse_contract::processing::Action;
        let parts: Vec<String> = [
            (Action::Drop, "drop"),
            (Action::Redact, "redact"),
            (Action::Sample, "sample"),
        ]
        .into_iter()
        .filter_map(|(action, name)| {
            let n = self.rules.iter().filter(|r| r.action == action).count();
            (n > 0).then(|| format!("{n} {name}"))
        })
        .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_counts_rules_by_action_and_is_absent_without_rules() {
        assert_eq!(ProcessingSpec::default().label(), None);
        let p: ProcessingSpec = tracehouse_contract::yaml::from_str(
            "rules:\n\
             - {name: a, action: drop, when: [{span: name, equals: x}]}\n\
             - {name: b, action: sample, sample: {percent: 5}}\n\
             - {name: c, action: drop, when: [{span: name, equals: y}]}\n",
        )
        .unwrap();
        assert_eq!(p.label().as_deref(), Some("2 drop, 1 sample"));
    }
}
