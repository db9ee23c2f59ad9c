//! The insert format, chosen for the server at hand: `clickhouse.insert_format` says `auto`,
//! `native` or `row_binary`, and for a JSON table `auto` depends on what the server reads.
//!
//! Native costs the server far less than RowBinary on a JSON table (its `JSON` and `Dynamic`
//! values arrive as columns, not parsed value by value: 8.2 against 22.8 µs of server CPU per
//! loadgen span on MergeTree, 1.6 against 15.7 µs on Null; `e2e/format-cost`,
//! docs/benchmarks.md). The collector writes JSON in Native in the flattened serialization,
//! which ClickHouse reads from 25.6 on (`output_format_native_use_flattened_dynamic_and_json_serialization`
//! came with it); it is verified here on 26.9 only (the engine this project's stack runs,
//! `tests/golden_native_json.rs`), so `auto` sends Native to a JSON table only from a server of
//! [`NATIVE_JSON_VERIFIED`] or newer, and RowBinary otherwise — also when the version cannot be
//! read. `native` sends Native whatever the server (for one known to read it), `row_binary`
//! always RowBinary (the way back, should a server misread Native). A Map table gets Native
//! under `auto` on every server, as before.
//!
//! The version is read once, after the start-up check and before the first insert; a collector
//! that could not read it keeps RowBinary until it restarts.

use std::time::Duration;

use tracehouse_schema::layouts::ServerVersion;
use tracehouse_schema::{Attributes, InsertFormat};

use crate::config::Config;
use crate::insert::encoder;
use crate::insert::sink::Sink;
use crate::metrics::Metrics;
use crate::workers::EncoderFactory;

/// The oldest server `auto` sends Native JSON to: the first release it was verified on.
pub const NATIVE_JSON_VERIFIED: ServerVersion = ServerVersion(26, 9);

/// The format chosen, and why (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub format: InsertFormat,
    pub why: String,
}

/// The format for `configured` on a table with `attributes`, given the server's `version()`
/// (`None`: not known). Pure; never returns `Auto`.
pub fn choose(configured: InsertFormat, attributes: Attributes, server: Option<&str>) -> Choice {
    let choice = |format, why: String| Choice { format, why };
    let parsed = server.and_then(ServerVersion::parse);
    match (configured, attributes) {
        (InsertFormat::Auto, Attributes::Json) => match parsed {
            Some(v) if v >= NATIVE_JSON_VERIFIED => choice(
                InsertFormat::Native,
                format!(
                    "auto: the server ({v}) reads Native JSON (verified from {NATIVE_JSON_VERIFIED})"
                ),
            ),
            Some(v) => choice(
                InsertFormat::RowBinary,
                format!(
                    "auto: Native JSON is verified from ClickHouse {NATIVE_JSON_VERIFIED}, the server is {v}"
                ),
            ),
            None => choice(
                InsertFormat::RowBinary,
                format!(
                    "auto: the server's version is not known ({}); Native JSON needs {NATIVE_JSON_VERIFIED} or newer",
                    server.unwrap_or("not read")
                ),
            ),
        },
        (InsertFormat::Native, Attributes::Json) => match parsed {
            Some(v) if v >= NATIVE_JSON_VERIFIED => {
                choice(InsertFormat::Native, "configured".into())
            }
            _ => choice(
                InsertFormat::Native,
                format!(
                    "configured, on a server ({}) older than {NATIVE_JSON_VERIFIED}, where Native JSON is not verified (ClickHouse reads it from 25.6)",
                    server.unwrap_or("version not read")
                ),
            ),
        },
        (configured, attributes) => choice(
            configured.resolve(attributes),
            if configured == InsertFormat::Auto {
                "auto".into()
            } else {
                "configured".into()
            },
        ),
    }
}

/// Whether the format depends on the server at all (a JSON table, `auto` or `native`).
fn depends_on_server(cfg: &Config) -> bool {
    let c = &cfg.clickhouse;
    c.attributes == Attributes::Json && c.insert_format != InsertFormat::RowBinary
}

/// The encoder factory for the server behind `sink`: `configured` (built from the
/// configuration, which knows no server) when the server does not matter or agrees, else one
/// for the format [`choose`] picks. Logs the choice.
pub async fn for_server(
    cfg: &Config,
    metrics: &Metrics,
    sink: &Sink,
    configured: EncoderFactory,
) -> EncoderFactory {
    let c = &cfg.clickhouse;
    let version = if depends_on_server(cfg) {
        match tokio::time::timeout(Duration::from_secs(10), sink.server_version()).await {
            Ok(Ok(v)) => Some(v),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the ClickHouse server's version");
                None
            }
            Err(_) => {
                tracing::warn!("cannot read the ClickHouse server's version: timed out");
                None
            }
        }
    } else {
        None
    };
    let choice = choose(c.insert_format, c.attributes, version.as_deref());
    let format = choice.format.clickhouse_name(c.attributes);
    if choice.why.contains("not verified") {
        tracing::warn!(format, why = %choice.why, "insert format");
    } else {
        tracing::info!(format, why = %choice.why, "insert format");
    }
    if choice.format == c.insert_format.resolve(c.attributes) {
        return configured;
    }
    match encoder::factory_with(cfg, metrics, choice.format) {
        Ok(f) => f,
        Err(e) => {
            // Cannot happen for a table the configured encoder was built for; kept safe.
            tracing::warn!(error = %e, "the chosen insert format cannot be built; keeping the configured one");
            configured
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: InsertFormat = InsertFormat::Auto;

    #[test]
    fn auto_sends_native_json_from_the_verified_release_on() {
        for v in ["26.9.2.1", "26.10.1.5", "27.1.1.1", "26.9"] {
            let c = choose(F, Attributes::Json, Some(v));
            assert_eq!(c.format, InsertFormat::Native, "{v}: {}", c.why);
        }
        for v in ["26.8.9.1", "25.6.1.1", "24.8.14.1", "25.12.1.1"] {
            let c = choose(F, Attributes::Json, Some(v));
            assert_eq!(c.format, InsertFormat::RowBinary, "{v}");
            let short = ServerVersion::parse(v).unwrap().to_string();
            assert!(
                c.why.ends_with(&format!("the server is {short}")),
                "{}",
                c.why
            );
        }
    }

    #[test]
    fn auto_keeps_rowbinary_when_the_version_is_not_known() {
        for v in [
            None,
            Some(""),
            Some("garbage"),
            Some("Code: 497. DB::Exception"),
        ] {
            let c = choose(F, Attributes::Json, v);
            assert_eq!(c.format, InsertFormat::RowBinary, "{v:?}");
            assert!(c.why.contains("not known"), "{}", c.why);
        }
    }

    #[test]
    fn an_explicit_format_is_kept_whatever_the_server() {
        for v in [None, Some("24.8.1.1"), Some("26.9.2.1")] {
            for a in [Attributes::Json, Attributes::Map] {
                assert_eq!(
                    choose(InsertFormat::RowBinary, a, v).format,
                    InsertFormat::RowBinary
                );
                assert_eq!(
                    choose(InsertFormat::Native, a, v).format,
                    InsertFormat::Native
                );
            }
        }
        // Native JSON on a server it is not verified on: sent, and said so.
        let c = choose(InsertFormat::Native, Attributes::Json, Some("25.8.1.1"));
        assert!(c.why.contains("not verified"), "{}", c.why);
        let c = choose(InsertFormat::Native, Attributes::Json, Some("26.9.1.1"));
        assert_eq!(c.why, "configured");
    }

    #[test]
    fn a_map_table_gets_native_under_auto_on_any_server() {
        for v in [None, Some("23.8.1.1"), Some("26.9.2.1")] {
            assert_eq!(choose(F, Attributes::Map, v).format, InsertFormat::Native);
        }
    }

    #[test]
    fn only_a_json_table_not_forced_to_rowbinary_asks_the_server() {
        let mut cfg = Config::default();
        for (attributes, format, asks) in [
            (Attributes::Json, InsertFormat::Auto, true),
            (Attributes::Json, InsertFormat::Native, true),
            (Attributes::Json, InsertFormat::RowBinary, false),
            (Attributes::Map, InsertFormat::Auto, false),
            (Attributes::Map, InsertFormat::Native, false),
        ] {
            cfg.clickhouse.attributes = attributes;
            cfg.clickhouse.insert_format = format;
            assert_eq!(depends_on_server(&cfg), asks, "{attributes:?} {format:?}");
        }
    }
}
