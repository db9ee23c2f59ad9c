//! Tests of the config revisions: every key and value the configuration types accept is in
//! the baseline or has a revision (discovered from the types themselves, not from a list kept
//! by hand), and what `required_revision` and `restrict` make of a configuration.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::config::{CommitFormat, Compression};
use crate::processing::ProcessingConfig;

const PROBE: &str = "zzz_probe";

/// One step of a path: a key, and whether its value is a sequence whose elements go on.
type Segment = (String, bool);

fn path_text(path: &[Segment]) -> String {
    path.iter()
        .map(|(k, each)| if *each { format!("{k}[]") } else { k.clone() })
        .collect::<Vec<_>>()
        .join(".")
}

/// A document that puts `leaf` (YAML flow text) at `path`.
fn document(path: &[Segment], leaf: &str) -> String {
    path.iter().rev().fold(leaf.to_owned(), |inner, (k, each)| {
        if *each {
            format!("{{{k}: [{inner}]}}")
        } else {
            format!("{{{k}: {inner}}}")
        }
    })
}

/// What `Config` names when it refuses `document` with an unknown `what` (`field`,
/// `variant`) at the probe: the fields or values it expected, else `None`.
fn expected(document: &str, what: &str) -> Option<Vec<String>> {
    let error = crate::yaml::from_str::<Config>(document).err()?.to_string();
    let rest = error.split_once(&format!("unknown {what} `{PROBE}`"))?.1;
    let rest = rest.split(" at line ").next().unwrap_or(rest);
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every key path under `path` (a struct) the types accept, and the values of every
/// enumeration among them, by probing: a struct refuses an unknown field naming the ones it
/// has, an enumeration an unknown value naming the ones it takes (`deny_unknown_fields`).
fn discover(path: &[Segment], keys: &mut Vec<String>, values: &mut BTreeMap<String, Vec<String>>) {
    let fields = expected(&document(path, &format!("{{{PROBE}: 1}}")), "field")
        .unwrap_or_else(|| panic!("{} is not a struct", path_text(path)));
    for field in fields {
        let mut key = path.to_vec();
        key.push((field, false));
        keys.push(path_text(&key));
        let probe = format!("{{{PROBE}: 1}}");
        if expected(&document(&key, &probe), "field").is_some() {
            discover(&key, keys, values);
            continue;
        }
        let mut each = key.clone();
        each.last_mut().unwrap().1 = true;
        if expected(&document(&each, &probe), "field").is_some() {
            discover(&each, keys, values);
        } else if let Some(v) = expected(&document(&key, PROBE), "variant") {
            values.insert(path_text(&key), v);
        } else if let Some(v) = expected(&document(&each, PROBE), "variant") {
            values.insert(path_text(&each), v);
        }
    }
}

fn discovered() -> (Vec<String>, BTreeMap<String, Vec<String>>) {
    let (mut keys, mut values) = (Vec::new(), BTreeMap::new());
    discover(&[], &mut keys, &mut values);
    (keys, values)
}

#[test]
fn the_probe_finds_what_the_types_have() {
    let (keys, values) = discovered();
    for key in [
        "kafka.brokers",
        "clickhouse.tls.ca_file",
        "processing.rules",
        "processing.rules[].when[].regex",
        "processing.rules[].sample.percent",
    ] {
        assert!(keys.iter().any(|k| k == key), "{key} not in {keys:?}");
    }
    assert_eq!(values["clickhouse.compression"], ["lz4", "none"]);
    assert!(
        values.contains_key("processing.rules[].redact.from[]"),
        "{values:?}"
    );
}

/// The test the table exists for: a key added to the configuration without a revision (in
/// neither the baseline nor `ADDED`) fails here, naming it.
#[test]
fn every_key_the_configuration_accepts_is_in_the_baseline_or_has_a_revision() {
    let (keys, _) = discovered();
    let unlisted: Vec<&String> = keys
        .iter()
        .filter(|k| !BASELINE.contains(&k.as_str()) && revision_of(k) == BASELINE_REVISION)
        .collect();
    assert!(
        unlisted.is_empty(),
        "configuration keys with no revision: {unlisted:?}; list each in revision::ADDED at the \
         revision that adds it (raise CONFIG_REVISION once per release that adds keys)"
    );
    // Neither list names a key the types do not have.
    for key in BASELINE.iter().copied().chain(
        ADDED
            .iter()
            .map(|a| a.key.split('=').next().unwrap_or(a.key)),
    ) {
        assert!(keys.iter().any(|k| k == key), "{key} is not a key any more");
    }
    for a in ADDED {
        assert!(
            !BASELINE.contains(&a.key),
            "{} is in the baseline and ADDED",
            a.key
        );
        assert!(a.revision > BASELINE_REVISION && a.revision <= CONFIG_REVISION);
    }
    assert_eq!(
        ADDED.iter().map(|a| a.revision).max(),
        Some(CONFIG_REVISION),
        "CONFIG_REVISION is the newest revision in the table"
    );
}

/// A value added to an enumeration is refused by the collectors before it as surely as a
/// new key: it needs an entry `key=value` in `ADDED`.
#[test]
fn every_value_of_an_enumeration_is_as_its_revision_had_it_or_has_a_revision() {
    let (_, values) = discovered();
    let listed: BTreeMap<&str, &[&str]> = VALUES.iter().copied().collect();
    for (key, have) in &values {
        let known = listed
            .get(key.as_str())
            .unwrap_or_else(|| panic!("{key} (values {have:?}) is not in revision::VALUES"));
        let unlisted: Vec<&String> = have
            .iter()
            .filter(|v| {
                !known.contains(&v.as_str()) && !ADDED.iter().any(|a| a.key == format!("{key}={v}"))
            })
            .collect();
        assert!(
            unlisted.is_empty(),
            "values of {key} with no revision: {unlisted:?}; list each in revision::ADDED as \
             `{key}=<value>`"
        );
        let gone: Vec<&&str> = known
            .iter()
            .filter(|v| !have.iter().any(|h| h == **v))
            .collect();
        assert!(gone.is_empty(), "{key} no longer takes {gone:?}");
    }
    for (key, _) in VALUES {
        assert!(values.contains_key(*key), "{key} is not an enumeration");
    }
}

#[test]
fn a_key_takes_the_revision_of_its_nearest_listed_ancestor() {
    assert_eq!(revision_of("kafka.brokers"), 1);
    assert_eq!(revision_of("kafka.commit_format"), 2);
    assert_eq!(revision_of("processing.rules[].action"), 2);
    assert_eq!(revision_of("processing.hash_key_file"), 2);
    // A name that merely starts like a listed key is not under it.
    assert_eq!(revision_of("kafka.commit_format_v2"), 1);
    assert_eq!(revision_of("kafka.properties.processing"), 1);
}

/// A configuration with every key of `ADDED` set away from its default.
fn everything_newer() -> Config {
    let mut c = Config::default();
    c.kafka.commit_format = CommitFormat::Th2;
    c.clickhouse.max_body_bytes = 1 << 20;
    c.clickhouse.insert_quorum = Some("auto".into());
    c.batch.max_linger_ms = 5_000;
    c.processing = crate::yaml::from_str::<ProcessingConfig>(
        "rules:\n- {name: health, action: drop, when: [{span: name, equals: /healthz}]}\n\
         hash_key_file: /etc/tracehouse/processing/hash.key\n",
    )
    .unwrap();
    // Baseline keys away from their defaults stay whatever the revision.
    c.clickhouse.compression = Compression::None;
    c.kafka.dead_letter_max_bytes = 4096;
    c
}

fn rendered_keys(c: &Config) -> BTreeSet<String> {
    fn walk(v: &Value, prefix: &str, out: &mut BTreeSet<String>) {
        if let Some(m) = v.as_mapping() {
            for (k, v) in m {
                let k = format!("{prefix}{}", k.as_str().unwrap());
                walk(v, &format!("{k}."), out);
                out.insert(k);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&crate::yaml::to_value(c).unwrap(), "", &mut out);
    out
}

#[test]
fn the_required_revision_is_the_newest_key_rendered() {
    assert_eq!(required_revision(&Config::default()).unwrap(), 1);
    let mut c = Config::default();
    c.clickhouse.compression = Compression::None;
    assert_eq!(required_revision(&c).unwrap(), 1, "a baseline key");
    c.clickhouse.insert_quorum = Some("2".into());
    assert_eq!(required_revision(&c).unwrap(), 2);
    assert_eq!(required_revision(&everything_newer()).unwrap(), 2);
}

#[test]
fn restricted_to_the_baseline_only_baseline_keys_are_rendered_and_the_rest_is_named() {
    let full = everything_newer();
    let (old, dropped) = restrict(&full, BASELINE_REVISION).unwrap();
    let keys: Vec<&str> = dropped.iter().map(|a| a.key).collect();
    assert_eq!(
        keys,
        [
            "kafka.commit_format",
            "clickhouse.max_body_bytes",
            "clickhouse.insert_quorum",
            "batch.max_linger_ms",
            "processing"
        ]
    );
    for key in rendered_keys(&old) {
        assert!(
            BASELINE.contains(&key.as_str()),
            "{key} rendered for revision 1"
        );
    }
    assert_eq!(required_revision(&old).unwrap(), 1);
    // What is left is as it was: the dropped keys back at their defaults, nothing else moved.
    let mut expected = full.clone();
    expected.kafka.commit_format = CommitFormat::default();
    expected.clickhouse.max_body_bytes = 0;
    expected.clickhouse.insert_quorum = None;
    expected.batch.max_linger_ms = crate::config::DEFAULT_MAX_LINGER_MS;
    expected.processing = ProcessingConfig::default();
    assert_eq!(old, expected);
    assert_eq!(
        crate::yaml::to_string(&old).unwrap(),
        crate::yaml::to_string(&expected).unwrap()
    );
}

#[test]
fn restricted_to_a_revision_that_knows_everything_nothing_changes() {
    let full = everything_newer();
    let (same, dropped) = restrict(&full, CONFIG_REVISION).unwrap();
    assert!(dropped.is_empty());
    assert_eq!(same, full);
    let (same, dropped) = restrict(&Config::default(), BASELINE_REVISION).unwrap();
    assert!(dropped.is_empty());
    assert_eq!(same, Config::default());
}

#[test]
fn paths_reach_into_sequences_and_name_values() {
    let v: Value = crate::yaml::from_str(
        "clickhouse: {compression: none}\n\
         processing: {rules: [{name: a, redact: {from: [span, links]}}, {name: b}]}\n",
    )
    .unwrap();
    assert!(present(&v, "clickhouse.compression"));
    assert!(present(&v, "clickhouse.compression=none"));
    assert!(!present(&v, "clickhouse.compression=lz4"));
    assert!(present(&v, "processing.rules[].redact.from[]=links"));
    assert!(!present(&v, "processing.rules[].redact.from[]=events"));
    assert!(!present(&v, "processing.rules[].sample"));
    let mut w = v.clone();
    assert!(remove(&mut w, "processing.rules[].redact.from[]=links"));
    assert!(!present(&w, "processing.rules[].redact.from[]=links"));
    assert!(present(&w, "processing.rules[].redact.from[]=span"));
    assert!(!remove(&mut w, "clickhouse.compression=lz4"));
    assert!(remove(&mut w, "clickhouse.compression=none"));
    assert!(!present(&w, "clickhouse.compression"));
}
