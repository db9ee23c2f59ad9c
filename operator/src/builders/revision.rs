//! A pipeline as the collector its gateway runs can take it (pure): the spec settings whose
//! configuration keys are newer than that collector's config revision are left out — of
//! `collector.yaml`, and of everything that follows from them (the processing hash key's
//! volume and its Secret's fingerprint) — so the configuration, its hash and the pod template
//! stay as they were: no rollout that would crash-loop on a key the collector refuses.
//!
//! The contract's `revision::restrict` decides which keys go; [`spec_setting`] maps each back
//! to the spec field that renders it, named in the status (`crate::skew`).

use std::borrow::Cow;

use tracehouse_contract::config as collector;
use tracehouse_contract::revision;

use super::{BuildError, collector_config, invalid};
use crate::crd::{TracePipeline, TracePipelineSpec};

/// A spec setting left out of `collector.yaml` because the gateway's collector does not
/// know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    /// The spec field (`spec.processing`), or the configuration key when no spec field
    /// renders it.
    pub field: String,
    /// The configuration revision that knows it.
    pub revision: u32,
}

/// Leaves one setting out of a spec.
type LeaveOut = fn(&mut TracePipelineSpec);

/// The spec field that renders configuration key `key` (an entry of `revision::ADDED`),
/// and how to leave it out of a spec; `None`: no spec field renders it (the operator leaves
/// the key at its default).
fn spec_setting(key: &str) -> Option<(&'static str, LeaveOut)> {
    Some(match key {
        "kafka.commit_format" => ("spec.kafka.commitFormat", |s| {
            s.kafka.commit_format = Default::default();
        }),
        "clickhouse.max_body_bytes" => ("spec.clickhouse.maxBodyBytes", |s| {
            s.clickhouse.max_body_bytes = None;
        }),
        "clickhouse.insert_quorum" => ("spec.clickhouse.insertQuorum", |s| {
            s.clickhouse.insert_quorum = None;
        }),
        "processing" => ("spec.processing", |s| s.processing = None),
        // The mechanism stays OAUTHBEARER: such a gateway cannot authenticate, and says so
        // through ConfigApplied rather than by a client of another mechanism.
        "kafka.oauth" => ("spec.kafka.sasl.oauth", |s| {
            if let Some(sasl) = &mut s.kafka.sasl {
                sasl.oauth = None;
            }
        }),
        _ => return None,
    })
}

fn failed(e: tracehouse_contract::yaml::Error) -> BuildError {
    invalid("spec", format!("cannot render the collector config: {e}"))
}

/// `tp` with every setting a collector of `revision` does not know left out, and those
/// settings; `tp` itself when it has none.
pub fn restricted(
    tp: &TracePipeline,
    revision: u32,
) -> Result<(Cow<'_, TracePipeline>, Vec<NotApplied>), BuildError> {
    let (_, dropped) = revision::restrict(&collector_config(tp)?, revision).map_err(failed)?;
    if dropped.is_empty() {
        return Ok((Cow::Borrowed(tp), Vec::new()));
    }
    let mut effective = tp.clone();
    let mut not_applied = Vec::with_capacity(dropped.len());
    for added in dropped {
        let field = match spec_setting(added.key) {
            Some((field, leave_out)) => {
                leave_out(&mut effective.spec);
                field.to_owned()
            }
            None => format!("collector.yaml {}", added.key),
        };
        not_applied.push(NotApplied {
            field,
            revision: added.revision,
        });
    }
    Ok((Cow::Owned(effective), not_applied))
}

/// The collector configuration of `tp` for a collector of `revision` (`None`: this
/// operator's), and the revision it needs. Restricted once more by the contract itself, so no
/// key above `revision` is ever rendered, whatever the spec mapping says.
pub fn config_for(
    tp: &TracePipeline,
    revision: Option<u32>,
) -> Result<(collector::Config, u32), BuildError> {
    let mut config = collector_config(tp)?;
    if let Some(r) = revision {
        config = revision::restrict(&config, r).map_err(failed)?.0;
    }
    let required = revision::required_revision(&config).map_err(failed)?;
    Ok((config, required))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::{CONFIG_KEY, desired, desired_for, referenced_secrets};
    use crate::crd::fixtures::sample;
    use crate::defaults::CollectorDefaults;
    use tracehouse_contract::revision::{ADDED, BASELINE_REVISION, CONFIG_REVISION};

    /// The sample with every newer setting the spec has: commit format, body limit, quorum,
    /// processing rules with a hash key.
    fn everything_newer() -> TracePipeline {
        let mut tp = sample();
        tp.spec.kafka.commit_format = collector::CommitFormat::Th2;
        tp.spec.clickhouse.max_body_bytes = Some(crate::crd::ByteSize::Quantity("1Mi".into()));
        tp.spec.clickhouse.insert_quorum = Some("auto".into());
        tp.spec.processing = Some(
            tracehouse_contract::yaml::from_str(
                "rules:\n\
                 - {name: health, action: drop, when: [{attribute: http.route, equals: /healthz}]}\n\
                 - {name: users, action: redact, redact: {keys: [enduser.id], with: hash}}\n\
                 hashKey: {name: pii-key, key: key}\n",
            )
            .unwrap(),
        );
        tp
    }

    #[test]
    fn for_the_baseline_each_newer_setting_is_named_and_left_out() {
        let tp = everything_newer();
        let (effective, not_applied) = restricted(&tp, BASELINE_REVISION).unwrap();
        let fields: Vec<(&str, u32)> = not_applied
            .iter()
            .map(|n| (n.field.as_str(), n.revision))
            .collect();
        assert_eq!(
            fields,
            [
                ("spec.kafka.commitFormat", 2),
                ("spec.clickhouse.maxBodyBytes", 2),
                ("spec.clickhouse.insertQuorum", 2),
                ("spec.processing", 2)
            ]
        );
        // The effective spec renders what the contract's restriction renders, and that is
        // the sample's configuration as it was: same text, same hash.
        let (config, required) = config_for(&effective, None).unwrap();
        assert_eq!(required, BASELINE_REVISION);
        let (restricted_config, _) = config_for(&tp, Some(BASELINE_REVISION)).unwrap();
        assert_eq!(config, restricted_config);
        assert_eq!(config, collector_config(&sample()).unwrap());
    }

    #[test]
    fn a_collector_that_knows_everything_gets_everything() {
        let tp = everything_newer();
        let (effective, not_applied) = restricted(&tp, CONFIG_REVISION).unwrap();
        assert!(not_applied.is_empty());
        assert!(matches!(effective, Cow::Borrowed(_)));
        let (_, required) = config_for(&tp, None).unwrap();
        assert_eq!(required, CONFIG_REVISION);
        // A spec with no newer setting needs only the baseline.
        let (_, required) = config_for(&sample(), None).unwrap();
        assert_eq!(required, BASELINE_REVISION);
    }

    /// OAUTHBEARER for a collector that does not know `kafka.oauth`: named, left out of the
    /// configuration and of the pod template (no client id and secret mounted), the mechanism
    /// kept (such a gateway cannot authenticate; ConfigApplied says why).
    #[test]
    fn oauth_for_an_older_collector_is_named_and_left_out() {
        let tp = crate::crd::fixtures::oauth();
        let (effective, not_applied) = restricted(&tp, BASELINE_REVISION).unwrap();
        assert_eq!(
            not_applied,
            [NotApplied {
                field: "spec.kafka.sasl.oauth".into(),
                revision: 2
            }]
        );
        let (config, required) = config_for(&effective, None).unwrap();
        assert_eq!(required, BASELINE_REVISION);
        assert_eq!(config.kafka.oauth, None);
        assert_eq!(config.kafka.properties["sasl.mechanism"], "OAUTHBEARER");
        assert!(!referenced_secrets(&effective).contains("kafka-oauth"));
        let old = desired_for(
            &tp,
            2,
            &CollectorDefaults::default(),
            Some(BASELINE_REVISION),
        )
        .unwrap();
        let volumes = old
            .deployment
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .volumes
            .unwrap();
        assert!(!volumes.iter().any(|v| v.name == "kafka-oauth"));
    }

    /// Every key of `ADDED` that a spec can render maps back to its spec field: a key added to
    /// the contract and rendered from a new spec field without a line in `spec_setting` fails.
    #[test]
    fn every_newer_key_the_spec_renders_names_its_spec_field() {
        let rendered =
            tracehouse_contract::yaml::to_value(&collector_config(&everything_newer()).unwrap())
                .unwrap();
        for added in ADDED {
            if revision::present(&rendered, added.key) {
                assert!(
                    spec_setting(added.key).is_some(),
                    "{} is rendered from the spec but has no spec field in spec_setting",
                    added.key
                );
            }
        }
    }

    /// The whole gateway for an older collector: the same ConfigMap and pod template as the
    /// pipeline without the newer settings (no hash key volume, no rollout), the settings
    /// named.
    #[test]
    fn the_gateway_for_an_older_collector_is_the_one_it_already_runs() {
        let defaults = CollectorDefaults::default();
        let before = desired(&sample(), 4).unwrap();
        let old = desired_for(&everything_newer(), 4, &defaults, Some(BASELINE_REVISION)).unwrap();
        assert_eq!(old.config_hash, before.config_hash);
        assert_eq!(
            old.config_map.data.as_ref().unwrap()[CONFIG_KEY],
            before.config_map.data.as_ref().unwrap()[CONFIG_KEY]
        );
        assert_eq!(old.deployment, before.deployment);
        assert_eq!(old.processing, None);
        assert_eq!(old.referenced_secrets, referenced_secrets(&sample()));
        assert_eq!(old.not_applied.len(), 4);
        assert_eq!(old.required_revision, BASELINE_REVISION);
        // Unknown or this operator's own: everything, the hash key's Secret among the pods'.
        let new = desired_for(&everything_newer(), 4, &defaults, None).unwrap();
        assert_ne!(new.config_hash, before.config_hash);
        assert!(new.referenced_secrets.contains("pii-key"));
        assert!(new.not_applied.is_empty());
        assert_eq!(new.required_revision, CONFIG_REVISION);
        assert_eq!(new.processing.as_deref(), Some("1 drop, 1 redact"));
    }
}
