//! What the fuzz targets check, through the collector's public API only, and the seed corpus
//! they start from (the load generator's records). The same contract as the seeded test in
//! `collector/src/encode/fuzz.rs`, here driven by libFuzzer's coverage feedback:
//!
//! - `otlp_proto`: whatever the in-place reader makes of a record must be what `prost` makes
//!   of it (`Encoder::push_record` reads in place and falls back to `prost` only when the
//!   in-place reader declines; `push_request` of `prost`'s message is the reference), in every
//!   encoder shape; a record `prost` refuses must be refused. No panic.
//! - `otlp_json`: decoding never panics (libFuzzer's `-timeout` catches hangs).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tracehouse_collector::decode::{self, Encoding};
use tracehouse_collector::encode::{Compression, Encoder, EncoderOptions};
use tracehouse_loadgen::generate::{Generator, GeneratorConfig};
use tracehouse_schema::{Attributes, Ident, InsertFormat, TableOptions};

/// One encoder per shape the collector writes: Map attributes in Native and RowBinary, JSON
/// attributes in RowBinary (as `collector/src/encode/differential.rs`).
fn encoders() -> Vec<Encoder> {
    [
        (Attributes::Map, InsertFormat::Native),
        (Attributes::Map, InsertFormat::RowBinary),
        (Attributes::Json, InsertFormat::RowBinary),
    ]
    .into_iter()
    .map(|(attributes, format)| {
        let mut t = TableOptions::new(
            Ident::new("database", "otel").expect("valid name"),
            Ident::new("table", "otel_traces").expect("valid name"),
        );
        t.attributes = attributes;
        t.attribute_keys_columns = true;
        let mut o = EncoderOptions::new(format);
        o.compression = Compression::None;
        Encoder::with_options(&t, o).expect("the encoders take the default table")
    })
    .collect()
}

/// The bodies each encoder writes for `push`, or `None` if any of them refuses the record.
fn bodies(push: impl Fn(&mut Encoder) -> bool) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for mut e in encoders() {
        if !push(&mut e) {
            return None;
        }
        out.push(e.finish().to_vec());
    }
    Some(out)
}

/// The `otlp_proto` contract (panics on a disagreement, which libFuzzer reports).
pub fn check_proto(data: &[u8]) {
    let collector = bodies(|e| e.push_record(data, Encoding::OtlpProto).is_ok());
    let reference = decode::decode(data, Encoding::OtlpProto)
        .ok()
        .and_then(|req| bodies(|e| e.push_request(&req).is_ok()));
    let verdict = |v: &Option<_>| if v.is_some() { "accepts" } else { "refuses" };
    assert!(
        collector == reference,
        "the collector and prost disagree on a {}-byte record (collector {}, prost {})",
        data.len(),
        verdict(&collector),
        verdict(&reference),
    );
}

/// The `otlp_json` contract: no panic.
pub fn check_json(data: &[u8]) {
    let _ = decode::decode(data, Encoding::OtlpJson);
}

/// Where a target writes its seed records when it starts (the environment variable names the
/// corpus directory it is given, which libFuzzer reads after the targets' `init`).
pub const SEED_DIR_VAR: &str = "TRACEHOUSE_FUZZ_SEED_DIR";

/// A target's `init`: the load generator's records, in `encoding`, written into
/// `$TRACEHOUSE_FUZZ_SEED_DIR` if it is set.
pub fn write_seeds(encoding: Encoding) {
    let Ok(dir) = std::env::var(SEED_DIR_VAR) else {
        return;
    };
    std::fs::create_dir_all(&dir).expect("creating the corpus directory");
    for (i, (proto, json)) in seeds(8).into_iter().enumerate() {
        let record = match encoding {
            Encoding::OtlpJson => json,
            _ => proto,
        };
        std::fs::write(format!("{dir}/seed-{i}"), record).expect("writing a seed");
    }
}

/// The seed records: the load generator's (12 spans each), as `otlp_proto` and `otlp_json`.
pub fn seeds(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut g = Generator::new(GeneratorConfig {
        seed: 7,
        spans_per_record: 12,
        ..GeneratorConfig::default()
    });
    (0..n)
        .map(|_| {
            let req: ExportTraceServiceRequest = g.next_record();
            (
                req.encode_to_vec(),
                tracehouse_loadgen::encode::to_otlp_json(&req).into_bytes(),
            )
        })
        .collect()
}
