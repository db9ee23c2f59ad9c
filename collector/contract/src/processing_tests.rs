//! Tests of the processing rules' configuration: parsing, validation naming the field, and
//! the tests' semantics.

use super::*;

fn rules(yaml: &str) -> ProcessingConfig {
    crate::yaml::from_str(yaml).unwrap()
}

fn field_of(p: &ProcessingConfig) -> String {
    p.validate().unwrap_err().field
}

const RECIPES: &str = r#"
rules:
  - name: health-checks
    action: drop
    when: [{attribute: http.route, in: [/healthz, /readyz]}]
  - name: synthetic
    action: drop
    when: [{resource: service.name, equals: synthetic-probe}]
  - name: credentials
    action: redact
    redact: {keys: [http.request.header.authorization, db.statement], with: remove}
  - name: cards
    action: redact
    redact: {values: ['4[0-9]{12}(?:[0-9]{3})?'], with: mask, from: [span, events]}
  - name: user-ids
    action: redact
    redact: {keys: [enduser.id], with: hash}
  - name: keep-a-tenth
    action: sample
    sample: {percent: 10, seed: 22}
"#;

#[test]
fn the_recipes_parse_validate_and_round_trip() {
    let p = rules(RECIPES);
    p.validate().unwrap();
    assert_eq!(p.rules.len(), 6);
    assert_eq!(p.rules[0].when[0].one_of.as_ref().unwrap().len(), 2);
    assert_eq!(p.rules[3].redact.as_ref().unwrap().with, Redaction::Mask);
    assert!(
        !p.rules[3]
            .redact
            .as_ref()
            .unwrap()
            .covers(AttributeList::Resource)
    );
    assert!(
        p.rules[4]
            .redact
            .as_ref()
            .unwrap()
            .covers(AttributeList::Links)
    );
    let s = p.rules[5].sample.as_ref().unwrap();
    assert_eq!((s.percent, s.seed, s.errors), (10.0, 22, Errors::Keep));
    let again: ProcessingConfig = rules(&crate::yaml::to_string(&p).unwrap());
    assert_eq!(again, p);
}

#[test]
fn unknown_keys_and_actions_are_refused_by_the_parser() {
    for bad in [
        "rules: [{name: a, action: delete, when: [{span: name, equals: x}]}]",
        "rules: [{name: a, action: drop, when: [{span: name, equal: x}]}]",
        "rules: [{name: a, action: sample, sample: {percent: 5, rate: 1}}]",
        "rules: [{name: a, action: drop, when: [{span: colour, equals: x}]}]",
    ] {
        assert!(
            crate::yaml::from_str::<ProcessingConfig>(bad).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn each_mistake_names_its_field() {
    let cases = [
        (
            "rules: [{name: Bad_Name, action: drop, when: [{span: name, equals: x}]}]",
            "processing.rules[0].name",
        ),
        (
            "rules: [{name: a, action: drop}]",
            "processing.rules[0].when",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: name, attribute: k, equals: x}]}]",
            "processing.rules[0].when[0]",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: name, equals: x, prefix: y}]}]",
            "processing.rules[0].when[0]",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: name, equals: x}, {attribute: k, regex: '(unclosed'}]}]",
            "processing.rules[0].when[1].regex",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: duration, below: 5 parsecs}]}]",
            "processing.rules[0].when[0].below",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: duration, equals: '5'}]}]",
            "processing.rules[0].when[0]",
        ),
        (
            "rules: [{name: a, action: drop, when: [{span: kind, exists: true}]}]",
            "processing.rules[0].when[0].exists",
        ),
        (
            "rules: [{name: a, action: drop, when: [{attribute: k, in: []}]}]",
            "processing.rules[0].when[0].in",
        ),
        (
            "rules: [{name: a, action: sample, sample: {percent: 0}}]",
            "processing.rules[0].sample.percent",
        ),
        (
            "rules: [{name: a, action: sample, sample: {percent: 100.5}}]",
            "processing.rules[0].sample.percent",
        ),
        ("rules: [{name: a, action: sample}]", "processing.rules[0]"),
        (
            "rules: [{name: a, action: drop, when: [{span: name, equals: x}], sample: {percent: 1}}]",
            "processing.rules[0]",
        ),
        (
            "rules: [{name: a, action: redact, redact: {with: mask}}]",
            "processing.rules[0].redact",
        ),
        (
            "rules: [{name: a, action: redact, redact: {patterns: ['['], with: mask}}]",
            "processing.rules[0].redact.patterns[0]",
        ),
        (
            "rules: [{name: a, action: redact, when: [{span: name, equals: x}], redact: {keys: [k], with: hash}}]",
            "processing.rules[0].when",
        ),
        (
            "rules: [{name: a, action: redact, redact: {keys: [k], with: hash}}, {name: a, action: redact, redact: {keys: [j], with: hash}}]",
            "processing.rules[1].name",
        ),
    ];
    for (yaml, field) in cases {
        assert_eq!(field_of(&rules(yaml)), field, "{yaml}");
    }
}

#[test]
fn tests_compare_the_text_and_only_exists_false_passes_an_absent_attribute() {
    let compile = |yaml: &str| {
        let c: Condition = crate::yaml::from_str(yaml).unwrap();
        c.compile("c").unwrap().1
    };
    let eq = compile("{attribute: k, equals: GET}");
    assert!(eq.text(Some(b"GET")));
    assert!(!eq.text(Some(b"GETS")));
    assert!(!eq.text(None));
    let one_of = compile("{attribute: k, in: [a, b]}");
    assert!(one_of.text(Some(b"b")) && !one_of.text(Some(b"c")));
    let prefix = compile("{attribute: k, prefix: /internal/}");
    assert!(prefix.text(Some(b"/internal/x")) && !prefix.text(Some(b"/api")));
    let glob = compile("{span: name, glob: 'GET /health*'}");
    assert!(glob.text(Some(b"GET /healthz")));
    assert!(
        !glob.text(Some(b"x GET /healthz")),
        "a glob matches the whole value"
    );
    assert!(compile("{span: name, glob: 'a?c'}").text(Some("aéc".as_bytes())));
    assert!(compile("{span: name, glob: 'a.c'}").text(Some(b"a.c")));
    assert!(!compile("{span: name, glob: 'a.c'}").text(Some(b"abc")));
    let re = compile("{attribute: k, regex: 'health'}");
    assert!(re.text(Some(b"/v1/healthz")), "a regex is found anywhere");
    let anchored = compile("{attribute: k, regex: '^/health'}");
    assert!(!anchored.text(Some(b"/v1/healthz")));
    assert!(compile("{attribute: k, exists: false}").text(None));
    assert!(!compile("{attribute: k, exists: false}").text(Some(b"")));
    assert!(compile("{attribute: k, exists: true}").text(Some(b"")));
    let below = compile("{span: duration, below: 1.5ms}");
    assert!(below.duration(1_499_999) && !below.duration(1_500_000));
    let above = compile("{span: duration, above: 2s}");
    assert!(above.duration(2_000_000_001) && !above.duration(2_000_000_000));
}

#[test]
fn durations_take_the_usual_units() {
    for (text, ns) in [
        ("100ns", 100),
        ("250us", 250_000),
        ("250µs", 250_000),
        ("5ms", 5_000_000),
        ("1.5s", 1_500_000_000),
        ("2m", 120_000_000_000),
        ("0ms", 0),
    ] {
        assert_eq!(parse_duration(text, "x").unwrap(), ns, "{text}");
    }
    for bad in ["5", "ms", "-1s", "1h", "1e3ms", ""] {
        assert!(parse_duration(bad, "x").is_err(), "{bad}");
    }
}

#[test]
fn rule_names_are_label_safe() {
    for ok in ["a", "health-checks", "pii.v2", "a_b", "x9"] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in ["", "-a", "a-", "A", "a b", "é", &"a".repeat(64)] {
        assert!(!valid_name(bad), "{bad}");
    }
}

#[test]
fn empty_processing_is_left_out_of_the_rendered_config() {
    assert!(ProcessingConfig::default().is_empty());
    assert!(!rules(RECIPES).is_empty());
}
