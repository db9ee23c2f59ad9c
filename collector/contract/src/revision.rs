//! Config revisions: which collector knows which configuration keys, so that an operator can
//! render only what the collector a gateway runs knows (docs/upgrade.md, *Operator ↔ collector
//! version skew*).
//!
//! Revision 1, the baseline, is exactly what the release d00aafd knows ([`BASELINE`], from
//! `git show d00aafd:collector/contract/src/config.rs`, checked against that build's own
//! refusals: `unknown field …, expected one of …` at every level). Every key added since is in
//! [`ADDED`] with the revision that introduced it; [`CONFIG_REVISION`] is the highest, what this
//! build knows. The collector reports its revision on /metrics
//! (`tracehouse_build_info{config_revision="N"}`, [`crate::metric_names::BUILD_INFO`]); one that
//! serves tracehouse metrics but no build_info is revision 1.
//!
//! Key paths: `kafka.commit_format`; `[]` after a segment means each element of a sequence
//! (`processing.rules[].action`); `=value` after a path names one value of an enumeration
//! (`clickhouse.compression=zstd`), for a value added to a key older collectors know.
//!
//! Adding a key: give it `skip_serializing_if` its default (a pipeline that leaves it at its
//! default renders what older collectors read, with the same hash), raise [`CONFIG_REVISION`]
//! once per release that adds keys, and list the key in [`ADDED`] at that revision. A new
//! value of an existing enumeration goes in [`ADDED`] as `key=value` and in [`VALUES`]. The
//! tests (`revision_tests.rs`) discover every key and value the configuration types accept
//! and fail on one that is neither in the baseline nor in [`ADDED`].

use crate::config::Config;
use crate::yaml::{self, Value};

/// The configuration revision this build knows.
pub const CONFIG_REVISION: u32 = 2;

/// The revision of a collector that reports none: the baseline, d00aafd and its kin.
pub const BASELINE_REVISION: u32 = 1;

/// Every key path the baseline (revision 1, release d00aafd) knows.
pub const BASELINE: &[&str] = &[
    "kafka",
    "kafka.brokers",
    "kafka.topics",
    "kafka.group_id",
    "kafka.encoding",
    "kafka.properties",
    "kafka.dead_letter_topic",
    "kafka.dead_letter_max_bytes",
    "clickhouse",
    "clickhouse.url",
    "clickhouse.database",
    "clickhouse.table",
    "clickhouse.attributes",
    "clickhouse.attribute_keys",
    "clickhouse.insert_format",
    "clickhouse.user",
    "clickhouse.password_file",
    "clickhouse.max_inflight_inserts",
    "clickhouse.request_timeout_ms",
    "clickhouse.retry_initial_ms",
    "clickhouse.retry_max_ms",
    "clickhouse.tls",
    "clickhouse.tls.ca_file",
    "clickhouse.tls.client_cert_file",
    "clickhouse.tls.client_key_file",
    "clickhouse.tls.insecure_skip_verify",
    "clickhouse.reject_breaker_records",
    "clickhouse.compression",
    "batch",
    "batch.max_bytes",
    "batch.max_records",
    "batch.linger_ms",
    "batch.bundle",
    "limits",
    "limits.max_inflight_bytes",
    "limits.max_record_bytes",
    "limits.encode_threads",
    "limits.max_expanded_record_bytes",
    "metrics_addr",
    "shutdown_deadline_ms",
];

/// A key (or a value, `key=value`) added after the baseline, and the revision that added it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    pub key: &'static str,
    pub revision: u32,
}

/// Every key added after the baseline; a key covers everything under it.
pub const ADDED: &[Added] = &[
    Added {
        key: "kafka.commit_format",
        revision: 2,
    },
    Added {
        key: "clickhouse.max_body_bytes",
        revision: 2,
    },
    Added {
        key: "clickhouse.insert_quorum",
        revision: 2,
    },
    Added {
        key: "batch.max_linger_ms",
        revision: 2,
    },
    Added {
        key: "batch.backlog_max_bytes",
        revision: 2,
    },
    Added {
        key: "processing",
        revision: 2,
    },
    Added {
        key: "kafka.oauth",
        revision: 2,
    },
];

/// The values of each enumeration key, as its revision introduced them (values added later
/// are also in [`ADDED`] as `key=value`).
pub const VALUES: &[(&str, &[&str])] = &[
    ("kafka.encoding", &["otlp_proto", "otlp_json"]),
    ("kafka.commit_format", &["th3", "th2"]),
    ("clickhouse.attributes", &["map", "json"]),
    (
        "clickhouse.insert_format",
        &["auto", "native", "row_binary"],
    ),
    ("clickhouse.compression", &["lz4", "none"]),
    ("processing.rules[].action", &["drop", "redact", "sample"]),
    (
        "processing.rules[].when[].span",
        &["name", "kind", "status", "scope", "duration"],
    ),
    (
        "processing.rules[].redact.with",
        &["remove", "mask", "hash"],
    ),
    (
        "processing.rules[].redact.from[]",
        &["resource", "span", "events", "links"],
    ),
    ("processing.rules[].sample.errors", &["keep", "sample"]),
];

/// The revision that introduced `key` (a path as above): its own entry in [`ADDED`] or its
/// nearest listed ancestor's, else the baseline.
pub fn revision_of(key: &str) -> u32 {
    ADDED
        .iter()
        .filter(|a| covers(a.key, key))
        .map(|a| a.revision)
        .max()
        .unwrap_or(BASELINE_REVISION)
}

/// Whether `entry` is `key` or one of its ancestors.
fn covers(entry: &str, key: &str) -> bool {
    key == entry
        || key
            .strip_prefix(entry)
            .is_some_and(|rest| rest.starts_with(['.', '[', '=']))
}

/// The lowest revision that knows every key `config` renders (keys at their default are not
/// rendered, so a configuration that uses nothing newer needs the baseline).
pub fn required_revision(config: &Config) -> Result<u32, yaml::Error> {
    let rendered = yaml::to_value(config)?;
    Ok(ADDED
        .iter()
        .filter(|a| present(&rendered, a.key))
        .map(|a| a.revision)
        .fold(BASELINE_REVISION, u32::max))
}

/// `config` as a collector of `revision` can read it: every rendered key above that revision
/// left out (back to its default), and the entries of [`ADDED`] that were left out, in table
/// order. Nothing else changes: the keys left are rendered as before.
pub fn restrict(config: &Config, revision: u32) -> Result<(Config, Vec<Added>), yaml::Error> {
    let mut rendered = yaml::to_value(config)?;
    let mut dropped = Vec::new();
    for added in ADDED.iter().filter(|a| a.revision > revision) {
        if remove(&mut rendered, added.key) {
            dropped.push(*added);
        }
    }
    if dropped.is_empty() {
        return Ok((config.clone(), dropped));
    }
    Ok((yaml::from_value(rendered)?, dropped))
}

/// A path split into its segments (name, each element of a sequence) and its value, if any.
fn parse(path: &str) -> (Vec<(&str, bool)>, Option<&str>) {
    let (keys, value) = match path.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (path, None),
    };
    let segments = keys
        .split('.')
        .map(|s| match s.strip_suffix("[]") {
            Some(name) => (name, true),
            None => (s, false),
        })
        .collect();
    (segments, value)
}

fn is(v: &Value, text: &str) -> bool {
    v.as_str() == Some(text)
}

/// Whether `path` is rendered in `v`.
pub fn present(v: &Value, path: &str) -> bool {
    let (segments, value) = parse(path);
    present_in(v, &segments, value)
}

fn present_in(v: &Value, segments: &[(&str, bool)], value: Option<&str>) -> bool {
    let Some(((name, each), rest)) = segments.split_first() else {
        return value.is_none_or(|want| is(v, want));
    };
    let Some(child) = v.as_mapping().and_then(|m| m.get(*name)) else {
        return false;
    };
    match (each, child.as_sequence()) {
        (true, Some(items)) => items.iter().any(|i| present_in(i, rest, value)),
        (true, None) => false,
        (false, _) => present_in(child, rest, value),
    }
}

/// Removes `path` from `v` wherever it is rendered (for `key=value`: only where it has that
/// value; in a sequence of values, that element); whether anything was removed.
fn remove(v: &mut Value, path: &str) -> bool {
    let (segments, value) = parse(path);
    remove_in(v, &segments, value)
}

fn remove_in(v: &mut Value, segments: &[(&str, bool)], value: Option<&str>) -> bool {
    let Some(((name, each), rest)) = segments.split_first() else {
        return false;
    };
    let Some(map) = v.as_mapping_mut() else {
        return false;
    };
    let Some(child) = map.get_mut(*name) else {
        return false;
    };
    if rest.is_empty() {
        let gone = match (each, value) {
            // The whole key (a sequence included).
            (_, None) => true,
            (false, Some(want)) => is(child, want),
            (true, Some(want)) => {
                let Some(items) = child.as_sequence_mut() else {
                    return false;
                };
                let before = items.len();
                items.retain(|i| !is(i, want));
                return items.len() != before;
            }
        };
        if gone {
            map.remove(*name);
        }
        return gone;
    }
    match (each, child.as_sequence_mut()) {
        (true, Some(items)) => {
            // From every element, not only the first that has it.
            let mut any = false;
            for item in items {
                any |= remove_in(item, rest, value);
            }
            any
        }
        (true, None) => false,
        (false, _) => remove_in(child, rest, value),
    }
}

#[cfg(test)]
#[path = "revision_tests.rs"]
mod tests;
