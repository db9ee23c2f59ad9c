//! Process: the `processing` rules (drop, redact, sample; `tracehouse_contract::processing`)
//! applied to one span's borrowed wire views between reading and writing its row.
//!
//! [`Processor`] is compiled once from the configuration and shared by every encoder
//! thread; each encoder keeps its own [`Scratch`]. The encoder calls [`Processor::resource`]
//! once per resource (resource redactions, and every resource condition evaluated where its
//! rule stands in the list) and [`Processor::span`] once per span (span, event and link
//! redactions, then drop and sample in rule order), and writes the row only for
//! [`Verdict::Keep`].
//!
//! The rules, numbered as the tests name them:
//! 1. Rules apply in the order written; a redaction is seen by every rule after it and by
//!    none before it (a drop on `enduser.id` placed after its hash tests the hash).
//! 2. A decision is a function of the span (with its resource and scope) and the rules
//!    alone: no clock, no randomness, nothing carried from span to span. A replayed record
//!    gives the same rows; what an insert token names stays what it was.
//! 3. A drop or sample rule applies when every condition in its `when` holds; a missing
//!    attribute fails every test but `exists: false` (and passes it under `not`).
//! 4. Sampling draws from the trace id only (`sample.rs`), so every span of a trace gets the
//!    same draw on every replica; an error span is kept unless `errors: sample`.
//! 5. A redacted value is a new `KeyValue` written in the record's arena; a removed one is
//!    left out of the list. The row writers see ordinary wire views either way.
//! 6. No rule: [`Processor::is_empty`], and the encoder does not call in at all.

mod redact;
pub mod sample;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors_tests;

use bumpalo::Bump;
use tracehouse_contract::processing::{
    Action, AttributeList, Errors, ProcessingConfig, RuleError, SpanField, Subject, Test,
};

use crate::decode::proto::{self, SpanScratch, SpanView};
use crate::rows;
pub use redact::Hasher;
use redact::Redactor;
use sample::Sampler;

/// What becomes of a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// Dropped or sampled out: no row.
    Skip,
}

/// What the rules did, per rule, in [`Scratch::counts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuleCounts {
    pub dropped: u64,
    pub sampled_out: u64,
    /// Spans in which the rule changed an attribute (its resource's count for each span).
    pub redacted: u64,
}

/// One compiled condition.
#[derive(Debug)]
struct Cond {
    subject: CondSubject,
    test: Test,
    not: bool,
}

#[derive(Debug)]
enum CondSubject {
    /// Index into [`Scratch::resource_results`] (evaluated once per resource).
    Resource(usize),
    /// Index into [`Processor::attribute_keys`].
    Attribute(usize),
    Span(SpanField),
}

#[derive(Debug)]
enum Kind {
    Drop,
    Redact(Box<Redactor>),
    Sample { sampler: Sampler, errors: Errors },
}

#[derive(Debug)]
struct Compiled {
    kind: Kind,
    when: Vec<Cond>,
    /// The keys of this rule's resource conditions and where their results go.
    resource_conds: Vec<(Vec<u8>, usize, Test, bool)>,
}

/// The compiled rules. `Sync`: one for every encoder thread.
#[derive(Debug, Default)]
pub struct Processor {
    names: Vec<String>,
    rules: Vec<Compiled>,
    /// Every span attribute a condition reads, each once: one pass over a span's
    /// attributes finds them all.
    attribute_keys: Vec<Vec<u8>>,
    /// Where `sampling.priority` is in [`Self::attribute_keys`], when a rule samples.
    priority_key: Option<usize>,
    resource_results: usize,
    redacts_resource: bool,
}

impl Processor {
    /// Compiles `cfg`, which the caller validated (`Config::validate`: names, one subject and
    /// one test per condition, the action's block); a pattern that does not compile still
    /// names its field here. `hash_key` is the content of `hash_key_file`, read by the caller.
    pub fn new(cfg: &ProcessingConfig, hash_key: Option<&[u8]>) -> Result<Self, RuleError> {
        let hasher = Hasher::new(hash_key);
        let mut p = Processor::default();
        for (i, rule) in cfg.rules.iter().enumerate() {
            let at = format!("processing.rules[{i}]");
            let mut compiled = Compiled {
                kind: Kind::Drop,
                when: Vec::new(),
                resource_conds: Vec::new(),
            };
            for (j, c) in rule.when.iter().enumerate() {
                let (subject, test) = c.compile(&format!("{at}.when[{j}]"))?;
                let subject = match subject {
                    Subject::Resource(key) => {
                        let slot = p.resource_results;
                        p.resource_results += 1;
                        compiled.resource_conds.push((
                            key.as_bytes().to_vec(),
                            slot,
                            test.clone(),
                            c.not,
                        ));
                        CondSubject::Resource(slot)
                    }
                    Subject::Attribute(key) => CondSubject::Attribute(p.key_index(key.as_bytes())),
                    Subject::Span(f) => CondSubject::Span(f),
                };
                compiled.when.push(Cond {
                    subject,
                    test,
                    not: c.not,
                });
            }
            compiled.kind = match rule.action {
                Action::Drop => Kind::Drop,
                Action::Redact => {
                    let r = rule
                        .redact
                        .as_ref()
                        .expect("validated: redact rules have `redact`");
                    p.redacts_resource |= r.covers(AttributeList::Resource);
                    Kind::Redact(Box::new(Redactor::new(
                        r,
                        &format!("{at}.redact"),
                        hasher.clone(),
                    )?))
                }
                Action::Sample => {
                    let s = rule
                        .sample
                        .as_ref()
                        .expect("validated: sample rules have `sample`");
                    Kind::Sample {
                        sampler: Sampler::new(s.percent, s.seed),
                        errors: s.errors,
                    }
                }
            };
            p.names.push(rule.name.clone());
            p.rules.push(compiled);
        }
        Ok(p)
    }

    /// The index of `key` in [`Self::attribute_keys`], added if new.
    fn key_index(&mut self, key: &[u8]) -> usize {
        match self.attribute_keys.iter().position(|k| k == key) {
            Some(idx) => idx,
            None => {
                self.attribute_keys.push(key.to_vec());
                self.attribute_keys.len() - 1
            }
        }
    }

    /// No rule: nothing to do for any span (rule 6).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules' names, in order (the `rule` label of the metrics).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// A scratch sized for these rules.
    pub fn scratch(&self) -> Scratch {
        Scratch {
            counts: vec![RuleCounts::default(); self.rules.len()],
            total: vec![RuleCounts::default(); self.rules.len()],
            resource_results: vec![false; self.resource_results],
            resource_redacted: vec![false; self.rules.len()],
            attribute_at: vec![None; self.attribute_keys.len()],
            ..Scratch::default()
        }
    }

    /// Once per resource, before its spans: redacts the resource's attributes and evaluates
    /// every resource condition where its rule stands (rule 1).
    pub fn resource<'r>(
        &self,
        attrs: &mut Vec<&'r [u8]>,
        arena: &'r Bump,
        st: &mut Scratch,
    ) -> proto::Result<()> {
        for (i, rule) in self.rules.iter().enumerate() {
            st.resource_redacted[i] = false;
            if let Kind::Redact(r) = &rule.kind
                && r.covers(AttributeList::Resource)
            {
                let mut all = 0..attrs.len();
                st.resource_redacted[i] =
                    r.redact(attrs, std::slice::from_mut(&mut all), arena, &mut st.text)?;
            }
            for (key, slot, test, not) in &rule.resource_conds {
                let value = first_value(attrs, key, proto::RESOURCE_VALUE_DEPTH, &mut st.text)?;
                st.resource_results[*slot] = test.text(value.then_some(st.text.as_slice())) != *not;
            }
        }
        Ok(())
    }

    /// Whether this processor changes resource attributes (the service name is then read
    /// after [`Self::resource`]).
    pub fn redacts_resource(&self) -> bool {
        self.redacts_resource
    }

    /// One span: redactions in place, then the verdict (rules 1–5); a sampled span's
    /// tracestate may change (`sample.rs`).
    pub fn span<'r>(
        &self,
        span: &mut SpanView<'r>,
        scope_name: &[u8],
        lists: &mut SpanScratch<'r>,
        arena: &'r Bump,
        st: &mut Scratch,
    ) -> proto::Result<Verdict> {
        st.attributes_read = false;
        for (i, rule) in self.rules.iter().enumerate() {
            match &rule.kind {
                Kind::Redact(r) => {
                    let mut changed = st.resource_redacted[i];
                    if r.covers(AttributeList::Span) {
                        let mut all = 0..lists.attrs.len();
                        let all = std::slice::from_mut(&mut all);
                        if r.redact(&mut lists.attrs, all, arena, &mut st.text)? {
                            changed = true;
                            st.attributes_read = false;
                        }
                    }
                    if r.covers(AttributeList::Events) {
                        let SpanScratch {
                            events,
                            event_attrs,
                            ..
                        } = lists;
                        changed |= r.redact_each(
                            events,
                            |e| &mut e.attrs,
                            event_attrs,
                            arena,
                            &mut st.ranges,
                            &mut st.text,
                        )?;
                    }
                    if r.covers(AttributeList::Links) {
                        let SpanScratch {
                            links, link_attrs, ..
                        } = lists;
                        changed |= r.redact_each(
                            links,
                            |l| &mut l.attrs,
                            link_attrs,
                            arena,
                            &mut st.ranges,
                            &mut st.text,
                        )?;
                    }
                    if changed {
                        st.counts[i].redacted += 1;
                    }
                }
                Kind::Drop => {
                    if self.holds(&rule.when, span, scope_name, &lists.attrs, st)? {
                        st.counts[i].dropped += 1;
                        return Ok(Verdict::Skip);
                    }
                }
                Kind::Sample { sampler, errors } => {
                    if *errors == Errors::Keep && span.status_code == STATUS_ERROR
                        || !self.holds(&rule.when, span, scope_name, &lists.attrs, st)?
                    {
                        continue;
                    }
                    if !st.attributes_read {
                        self.read_attributes(&lists.attrs, st)?;
                    }
                    let at = self.priority_key.and_then(|k| st.attribute_at[k]);
                    let priority = match at {
                        Some(at) => priority_of(proto::kv(lists.attrs[at])?.value),
                        None => sample::Priority::Defer,
                    };
                    match sampler.draw(span.trace_id, span.trace_state, priority, &mut st.text) {
                        sample::Draw::Drop => {
                            st.counts[i].sampled_out += 1;
                            return Ok(Verdict::Skip);
                        }
                        sample::Draw::KeepWith => {
                            span.trace_state = arena.alloc_slice_copy(&st.text);
                        }
                        sample::Draw::Keep => {}
                    }
                }
            }
        }
        Ok(Verdict::Keep)
    }

    /// Whether every condition holds (rule 3).
    fn holds(
        &self,
        when: &[Cond],
        span: &SpanView<'_>,
        scope_name: &[u8],
        attrs: &[&[u8]],
        st: &mut Scratch,
    ) -> proto::Result<bool> {
        for c in when {
            let pass = match &c.subject {
                CondSubject::Resource(slot) => {
                    // Stored with `not` applied.
                    if !st.resource_results[*slot] {
                        return Ok(false);
                    }
                    continue;
                }
                CondSubject::Attribute(k) => {
                    if !st.attributes_read {
                        self.read_attributes(attrs, st)?;
                    }
                    match st.attribute_at[*k] {
                        Some(at) => {
                            let kv = proto::kv(attrs[at])?;
                            st.text.clear();
                            rows::push_value_as_string(
                                kv.value,
                                &mut st.text,
                                proto::SPAN_VALUE_DEPTH,
                            )?;
                            c.test.text(Some(&st.text))
                        }
                        None => c.test.text(None),
                    }
                }
                CondSubject::Span(SpanField::Name) => c.test.text(Some(span.name)),
                CondSubject::Span(SpanField::Kind) => {
                    c.test.text(Some(rows::span_kind(span.kind).as_bytes()))
                }
                CondSubject::Span(SpanField::Status) => c
                    .test
                    .text(Some(rows::status_code(span.status_code).as_bytes())),
                CondSubject::Span(SpanField::Scope) => c.test.text(Some(scope_name)),
                CondSubject::Span(SpanField::Duration) => c.test.duration(rows::duration_ns(
                    span.start_time_unix_nano,
                    span.end_time_unix_nano,
                )),
            };
            if pass == c.not {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// One pass over the span's attributes: where each key a condition reads first appears
    /// (pdata's `Get` returns the first of repeated keys).
    fn read_attributes(&self, attrs: &[&[u8]], st: &mut Scratch) -> proto::Result<()> {
        st.attribute_at.fill(None);
        for (i, body) in attrs.iter().enumerate() {
            let key = proto::kv_key(body)?;
            for (k, want) in self.attribute_keys.iter().enumerate() {
                if st.attribute_at[k].is_none() && key == want.as_slice() {
                    st.attribute_at[k] = Some(i);
                }
            }
        }
        st.attributes_read = true;
        Ok(())
    }
}

/// `STATUS_CODE_ERROR`.
const STATUS_ERROR: i32 = 2;

/// A `sampling.priority` value: 0 drops, above 0 keeps; an int, a double or a text that
/// parses as a number; anything else defers to the draw.
pub(crate) fn priority_of(value: proto::Value<'_>) -> sample::Priority {
    use sample::Priority;
    let n = match value {
        proto::Value::Int(i) => i as f64,
        proto::Value::Double(d) => d,
        proto::Value::Str(s) => match std::str::from_utf8(s)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
        {
            Some(d) => d,
            None => return Priority::Defer,
        },
        _ => return Priority::Defer,
    };
    if n == 0.0 {
        Priority::Drop
    } else if n > 0.0 {
        Priority::Keep
    } else {
        Priority::Defer
    }
}

/// Renders the first value under `key` into `out`; whether there is one.
fn first_value(
    attrs: &[&[u8]],
    key: &[u8],
    depth: usize,
    out: &mut Vec<u8>,
) -> proto::Result<bool> {
    for body in attrs {
        if proto::kv_key(body)? == key {
            out.clear();
            rows::push_value_as_string(proto::kv(body)?.value, out, depth)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// An encoder's working memory for the rules, reused span after span.
#[derive(Debug, Default)]
pub struct Scratch {
    /// What each rule did to the current record.
    counts: Vec<RuleCounts>,
    /// … and to the records in since the last [`Scratch::drain_counts`].
    total: Vec<RuleCounts>,
    resource_results: Vec<bool>,
    /// Per rule: it changed the current resource's attributes.
    resource_redacted: Vec<bool>,
    /// Per key of [`Processor::attribute_keys`]: its first index in the span's attributes.
    attribute_at: Vec<Option<usize>>,
    attributes_read: bool,
    /// A value's text.
    text: Vec<u8>,
    /// The events' or links' attribute ranges while a redaction rewrites them.
    ranges: Vec<std::ops::Range<usize>>,
}

impl Scratch {
    /// The current record is in (`true`: its counts join the total) or taken back.
    pub fn end_record(&mut self, kept: bool) {
        for (t, c) in self.total.iter_mut().zip(&mut self.counts) {
            let c = std::mem::take(c);
            if kept {
                t.dropped += c.dropped;
                t.sampled_out += c.sampled_out;
                t.redacted += c.redacted;
            }
        }
    }

    /// What each rule did to the records in since the last call, rule by rule; counting
    /// starts anew (in place: no allocation per record).
    pub fn drain_counts(&mut self) -> impl Iterator<Item = RuleCounts> + '_ {
        self.total.iter_mut().map(std::mem::take)
    }
}
