//! `processing`: the rules a gateway applies to spans between Kafka and ClickHouse — drop,
//! redact, sample — as the user writes them (the collector's YAML and, the same type, the
//! `TracePipeline`'s `spec.processing.rules`), their pure validation, and the one definition
//! of how a value is tested ([`Test`]).
//!
//! Every key is one word, so a collector file and a CRD read alike. A decision is a function
//! of the span and these rules alone (no clock, no randomness, no state carried between
//! spans): a replayed record gives the same rows, which is what keeps exactly-once when
//! processing is on. The engine that applies them to the wire views is the collector's
//! `process/`.
//!
//! ```yaml
//! processing:
//!   rules:
//!     - name: health-checks
//!       action: drop
//!       when: [{attribute: http.route, in: [/healthz, /readyz]}]
//!     - name: credentials
//!       action: redact
//!       redact: {keys: [http.request.header.authorization], with: remove}
//!     - name: keep-a-tenth
//!       action: sample
//!       sample: {percent: 10}
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `processing`: rules applied in order to every span; none set, the collector writes every
/// span as it came (and does no work for it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessingConfig {
    pub rules: Vec<Rule>,
    /// The key of `with: hash` (HMAC-SHA256); unset, values are hashed with plain SHA-256
    /// (the OpenTelemetry Collector's `attributes` processor's `hash`). The operator mounts
    /// `spec.processing.hashKey`'s Secret here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash_key_file: Option<PathBuf>,
}

impl ProcessingConfig {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.hash_key_file.is_none()
    }
}

/// One rule. Its `name` labels the metrics of what it did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.redact) == (self.action == 'redact')",
     "message": "spec.processing.rules[].redact is set exactly when action is redact"},
    {"rule": "has(self.sample) == (self.action == 'sample')",
     "message": "spec.processing.rules[].sample is set exactly when action is sample"},
    {"rule": "self.action != 'drop' || (has(self.when) && size(self.when) > 0)",
     "message": "spec.processing.rules[].when: a drop rule needs at least one condition (it would drop every span)"},
    {"rule": "self.action != 'redact' || !has(self.when) || size(self.when) == 0",
     "message": "spec.processing.rules[].when is not supported on redact rules: a redaction applies to every span"},
])))]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Lower-case letters, digits, `-`, `_` and `.`; unique among the rules.
    #[cfg_attr(
        feature = "schemars",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$"))
    )]
    pub name: String,
    pub action: Action,
    /// The spans the rule applies to: all conditions hold (none: every span).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(length(max = 32)))]
    pub when: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redact: Option<Redact>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<Sample>,
}

/// What a rule does to the spans it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// The span is not written (the OpenTelemetry Collector's `filter` processor).
    Drop,
    /// Attributes are removed, masked or hashed (`redaction`, `attributes` processors).
    Redact,
    /// The span is kept for a share of trace ids (`probabilistic_sampler`).
    Sample,
}

/// One test of one field of the span. Exactly one subject (`resource`, `attribute`, `span`)
/// and exactly one test; `not` inverts the result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(extend("x-kubernetes-validations" = [
    {"rule": "[has(self.resource), has(self.attribute), has(self.span)].exists_one(x, x)",
     "message": "spec.processing.rules[].when[]: name exactly one of resource, attribute, span"},
    {"rule": "[has(self.equals), has(self.__in__), has(self.prefix), has(self.glob), has(self.regex), has(self.exists), has(self.below), has(self.above)].exists_one(x, x)",
     "message": "spec.processing.rules[].when[]: give exactly one test: equals, in, prefix, glob, regex, exists, below or above"},
    {"rule": "(has(self.below) || has(self.above)) == (has(self.span) && self.span == 'duration')",
     "message": "spec.processing.rules[].when[]: below/above test span: duration, and span: duration takes only them"},
    {"rule": "!has(self.exists) || !has(self.span)",
     "message": "spec.processing.rules[].when[].exists tests an attribute, not a span field"},
])))]
#[serde(default, deny_unknown_fields)]
pub struct Condition {
    /// A resource attribute, by key (`service.name`, `k8s.namespace.name`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// A span attribute, by key (`http.route`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attribute: Option<String>,
    /// A field of the span itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span: Option<SpanField>,
    /// The value (an attribute's as the `Map` column shows it) is this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    /// The value is one of these.
    #[serde(rename = "in", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The whole value matches: `*` any run of characters, `?` one character.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    /// A regular expression found anywhere in the value (anchor it with `^…$`), in the
    /// syntax of Rust's `regex` crate, matched in linear time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// The attribute is present (`true`) or absent (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// `span: duration` is shorter than this (`250ms`, `2s`, `500us`, `100ns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub below: Option<String>,
    /// `span: duration` is longer than this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub above: Option<String>,
    /// Inverts the test.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not: bool,
}

/// The span's own fields a condition can test, as the table's columns show them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SpanField {
    /// `SpanName`.
    Name,
    /// `SpanKind`: `Unspecified`, `Internal`, `Server`, `Client`, `Producer`, `Consumer`.
    Kind,
    /// `StatusCode`: `Unset`, `Ok`, `Error`.
    Status,
    /// `ScopeName`: the instrumentation scope.
    Scope,
    /// `Duration`, with `below`/`above`.
    Duration,
}

/// `redact`: which attributes, and what becomes of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(extend("x-kubernetes-validations" = [
    {"rule": "(has(self.keys) && size(self.keys) > 0) || (has(self.patterns) && size(self.patterns) > 0) || (has(self.values) && size(self.values) > 0)",
     "message": "spec.processing.rules[].redact: name the attributes: keys, patterns or values"},
])))]
#[serde(default, deny_unknown_fields)]
pub struct Redact {
    /// Attributes with exactly these keys.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Attributes whose key matches one of these regular expressions (found anywhere in the
    /// key; anchor with `^…$`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<String>,
    /// String values in which one of these regular expressions is found (card numbers,
    /// e-mail addresses): `mask` replaces each match, `hash` and `remove` the attribute.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    pub with: Redaction,
    /// Which attribute lists (default: all four).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<AttributeList>,
}

/// What a redacted attribute becomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Redaction {
    /// The attribute is removed.
    #[default]
    Remove,
    /// The value becomes `****` (with `values`: each match in it does), as the
    /// OpenTelemetry Collector's `redaction` processor writes.
    Mask,
    /// The value becomes the lower-case hex SHA-256 of its text (HMAC-SHA256 with the
    /// processing's hash key when one is set): equal values still group.
    Hash,
}

/// The attribute lists of a span row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum AttributeList {
    Resource,
    Span,
    Events,
    Links,
}

/// `sample`: keep the spans of a share of trace ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(extend("x-kubernetes-validations" = [
    {"rule": "self.percent > 0.0", "message": "spec.processing.rules[].sample.percent must be above 0 (to drop every span, use a drop rule)"},
])))]
#[serde(deny_unknown_fields)]
pub struct Sample {
    /// The share of traces kept, in percent (0 < percent ≤ 100).
    #[cfg_attr(feature = "schemars", schemars(range(min = 0.0, max = 100.0)))]
    pub percent: f64,
    /// The hash seed: replicas and the OpenTelemetry Collector's `probabilistic_sampler`
    /// (mode `hash_seed`, `hash_seed: <seed>`) decide alike for equal seeds; a different
    /// seed samples a different, independent set of traces.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seed: u32,
    /// `keep` (default): a span with status `Error` is kept whatever the trace's draw;
    /// `sample`: errors are sampled like every other span.
    #[serde(default, skip_serializing_if = "Errors::is_default")]
    pub errors: Errors,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// What sampling does with error spans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Errors {
    #[default]
    Keep,
    Sample,
}

impl Errors {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A processing rule that cannot run, naming the field (`processing.rules[2].when[0].regex`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{field}`: {reason}")]
pub struct RuleError {
    pub field: String,
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> RuleError {
    RuleError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// A compiled test of one text value: the one definition of `equals`, `in`, `prefix`,
/// `glob` and `regex` (and `exists` for attributes, `below`/`above` for durations).
#[derive(Debug, Clone)]
pub enum Test {
    Equals(String),
    OneOf(Vec<String>),
    Prefix(String),
    /// `glob` and `regex`, compiled.
    Regex(regex::bytes::Regex),
    Exists(bool),
    /// Duration in nanoseconds: shorter than.
    Below(u64),
    /// Duration in nanoseconds: longer than.
    Above(u64),
}

impl Test {
    /// Whether a text value passes (`None`: the attribute is absent; only `exists: false`
    /// passes then). Durations pass only through [`Test::duration`].
    pub fn text(&self, value: Option<&[u8]>) -> bool {
        match (self, value) {
            (Test::Exists(want), v) => v.is_some() == *want,
            (_, None) => false,
            (Test::Equals(s), Some(v)) => v == s.as_bytes(),
            (Test::OneOf(list), Some(v)) => list.iter().any(|s| v == s.as_bytes()),
            (Test::Prefix(p), Some(v)) => v.starts_with(p.as_bytes()),
            (Test::Regex(re), Some(v)) => re.is_match(v),
            (Test::Below(_) | Test::Above(_), Some(_)) => false,
        }
    }

    /// Whether a duration (ns) passes.
    pub fn duration(&self, ns: u64) -> bool {
        match self {
            Test::Below(limit) => ns < *limit,
            Test::Above(limit) => ns > *limit,
            _ => false,
        }
    }
}

/// What a condition tests, once validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject<'a> {
    Resource(&'a str),
    Attribute(&'a str),
    Span(SpanField),
}

impl Condition {
    /// The subject and the compiled test, or the first problem, naming `at`'s field.
    pub fn compile(&self, at: &str) -> Result<(Subject<'_>, Test), RuleError> {
        let subjects = [
            self.resource.as_deref().map(Subject::Resource),
            self.attribute.as_deref().map(Subject::Attribute),
            self.span.map(Subject::Span),
        ];
        let mut given = subjects.into_iter().flatten();
        let (Some(subject), None) = (given.next(), given.next()) else {
            return Err(err(
                at,
                "name exactly one of `resource`, `attribute`, `span`",
            ));
        };
        if let Subject::Resource(k) | Subject::Attribute(k) = subject
            && k.is_empty()
        {
            return Err(err(at, "the attribute key must not be empty"));
        }
        let mut tests = Vec::new();
        if let Some(s) = &self.equals {
            tests.push(Test::Equals(s.clone()));
        }
        if let Some(list) = &self.one_of {
            if list.is_empty() {
                return Err(err(format!("{at}.in"), "must list at least one value"));
            }
            tests.push(Test::OneOf(list.clone()));
        }
        if let Some(p) = &self.prefix {
            tests.push(Test::Prefix(p.clone()));
        }
        if let Some(g) = &self.glob {
            tests.push(Test::Regex(compile_regex(
                &glob_regex(g),
                &format!("{at}.glob"),
            )?));
        }
        if let Some(r) = &self.regex {
            tests.push(Test::Regex(compile_regex(r, &format!("{at}.regex"))?));
        }
        if let Some(e) = self.exists {
            if matches!(subject, Subject::Span(_)) {
                return Err(err(
                    format!("{at}.exists"),
                    "tests an attribute, not a span field",
                ));
            }
            tests.push(Test::Exists(e));
        }
        if let Some(d) = &self.below {
            tests.push(Test::Below(parse_duration(d, &format!("{at}.below"))?));
        }
        if let Some(d) = &self.above {
            tests.push(Test::Above(parse_duration(d, &format!("{at}.above"))?));
        }
        let (Some(test), None) = (tests.pop(), tests.pop()) else {
            return Err(err(
                at,
                "give exactly one test: equals, in, prefix, glob, regex, exists, below or above",
            ));
        };
        let duration_test = matches!(test, Test::Below(_) | Test::Above(_));
        let duration_subject = subject == Subject::Span(SpanField::Duration);
        if duration_test != duration_subject {
            return Err(err(
                at,
                "`below`/`above` test `span: duration`, and `span: duration` takes only them",
            ));
        }
        Ok((subject, test))
    }
}

/// A glob (`*`, `?`, everything else literal) as a regular expression over the whole value.
pub fn glob_regex(glob: &str) -> String {
    let mut out = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => out.push_str("(?s:.*)"),
            '?' => out.push_str("(?s:.)"),
            c => out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4]))),
        }
    }
    out.push('$');
    out
}

/// Compiles a user's regular expression (bytes, Unicode-aware), bounded in size.
pub fn compile_regex(pattern: &str, at: &str) -> Result<regex::bytes::Regex, RuleError> {
    regex::bytes::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            err(
                at,
                format!("{pattern:?} is not a valid regular expression: {e}"),
            )
        })
}

/// `250ms`, `2s`, `1.5s`, `500us`, `100ns`, `1m` → nanoseconds.
pub fn parse_duration(text: &str, at: &str) -> Result<u64, RuleError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        _ => {
            return Err(err(
                at,
                format!("{text:?}: give a number and a unit (ns, us, ms, s, m), e.g. 250ms"),
            ));
        }
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * scale < u64::MAX as f64 => {
            Ok((n * scale).round() as u64)
        }
        _ => Err(err(at, format!("{text:?} is not a duration, e.g. 250ms"))),
    }
}

impl Redact {
    /// The compiled key patterns and value patterns.
    pub fn compile(
        &self,
        at: &str,
    ) -> Result<(Vec<regex::bytes::Regex>, Vec<regex::bytes::Regex>), RuleError> {
        if self.keys.is_empty() && self.patterns.is_empty() && self.values.is_empty() {
            return Err(err(
                at,
                "name the attributes: `keys`, `patterns` or `values`",
            ));
        }
        if let Some(i) = self.keys.iter().position(String::is_empty) {
            return Err(err(format!("{at}.keys[{i}]"), "must not be empty"));
        }
        let compile_all = |list: &[String], what: &str| {
            list.iter()
                .enumerate()
                .map(|(i, p)| compile_regex(p, &format!("{at}.{what}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok((
            compile_all(&self.patterns, "patterns")?,
            compile_all(&self.values, "values")?,
        ))
    }

    /// Whether the rule redacts the given list.
    pub fn covers(&self, list: AttributeList) -> bool {
        self.from.is_empty() || self.from.contains(&list)
    }
}

impl Sample {
    pub fn validate(&self, at: &str) -> Result<(), RuleError> {
        if !(self.percent > 0.0 && self.percent <= 100.0) {
            return Err(err(
                format!("{at}.percent"),
                format!("{} is not in (0, 100]", self.percent),
            ));
        }
        Ok(())
    }
}

/// The most rules a pipeline takes (each span is tested against each).
pub const MAX_RULES: usize = 64;

impl ProcessingConfig {
    /// Checks every rule (names, one subject and one test per condition, regular
    /// expressions, durations, percentages); the first problem names its field.
    pub fn validate(&self) -> Result<(), RuleError> {
        if self.rules.len() > MAX_RULES {
            return Err(err(
                "processing.rules",
                format!("{} rules, at most {MAX_RULES}", self.rules.len()),
            ));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let at = format!("processing.rules[{i}]");
            rule.validate(&at)?;
            if let Some(j) = self.rules[..i].iter().position(|r| r.name == rule.name) {
                return Err(err(
                    format!("{at}.name"),
                    format!("{:?} is also the name of rules[{j}]", rule.name),
                ));
            }
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&b.len())
        && inner(&b[0])
        && inner(&b[b.len() - 1])
        && b.iter()
            .all(|c| inner(c) || matches!(c, b'-' | b'_' | b'.'))
}

impl Rule {
    pub fn validate(&self, at: &str) -> Result<(), RuleError> {
        if !valid_name(&self.name) {
            return Err(err(
                format!("{at}.name"),
                format!(
                    "{:?}: 1–63 lower-case letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit",
                    self.name
                ),
            ));
        }
        for (j, c) in self.when.iter().enumerate() {
            c.compile(&format!("{at}.when[{j}]"))?;
        }
        match (self.action, &self.redact, &self.sample) {
            (Action::Drop, None, None) if !self.when.is_empty() => Ok(()),
            (Action::Drop, None, None) => Err(err(
                format!("{at}.when"),
                "a drop rule needs at least one condition (it would drop every span)",
            )),
            (Action::Redact, Some(r), None) if self.when.is_empty() => {
                r.compile(&format!("{at}.redact")).map(|_| ())
            }
            (Action::Redact, Some(_), None) => Err(err(
                format!("{at}.when"),
                "is not supported on redact rules: a redaction applies to every span",
            )),
            (Action::Sample, None, Some(s)) => s.validate(&format!("{at}.sample")),
            (action, _, _) => Err(err(
                at,
                format!(
                    "action {} takes {}",
                    serde_name(action),
                    match action {
                        Action::Drop => "neither `redact` nor `sample`",
                        Action::Redact => "`redact` (and not `sample`)",
                        Action::Sample => "`sample` (and not `redact`)",
                    }
                ),
            )),
        }
    }
}

fn serde_name(a: Action) -> &'static str {
    match a {
        Action::Drop => "drop",
        Action::Redact => "redact",
        Action::Sample => "sample",
    }
}

#[cfg(test)]
#[path = "processing_tests.rs"]
mod tests;
