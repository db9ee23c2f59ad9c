//! `tracehouse-loadgen`: produce numbered OTLP traces into Kafka, verify them in ClickHouse.
//!
//! ```text
//! tracehouse-loadgen produce --spans 1000000 --compression lz4 --generator-id run-1
//! tracehouse-loadgen verify --generator-id run-1 --expected 1000000
//! ```
//!
//! `produce` prints a progress line on stderr every second and a JSON summary on stdout.
//! `verify` prints a table on stderr and a JSON report on stdout, and exits with:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every expected span present exactly once, nothing else |
//! | 1 | error (cannot connect, bad arguments to the library, …) |
//! | 2 | usage error (from the argument parser) |
//! | 3 | spans lost (missing > 0), no duplicates |
//! | 4 | duplicates, no loss |
//! | 5 | both lost and duplicated spans |
//! | 6 | neither, but rows with an out-of-range or malformed `loadgen.seq` |

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use clap::{Args, Parser, Subcommand};
use tracehouse_loadgen::{
    Compression, Encoding, Expectation, GeneratorConfig, Hostile, Partitioning, ProduceOptions,
    Progress, Shape, VerifyOptions, VerifyReport, produce_with_progress, verify,
};
use tracehouse_schema::Attributes;

#[derive(Debug, Parser)]
#[command(name = "tracehouse-loadgen", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Produce N spans of realistic traces into a Kafka topic.
    Produce(ProduceArgs),
    /// Count found / missing / duplicated spans per generator in ClickHouse.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
struct ProduceArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    #[arg(long, default_value = "otlp_spans")]
    topic: String,
    /// Partitions to create the topic with if it does not exist.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Replication factor to create the topic with if it does not exist.
    #[arg(long, default_value_t = 1)]
    replication_factor: i32,
    /// Total spans to produce.
    #[arg(long)]
    spans: u64,
    /// Spans per second (default: as fast as possible).
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 100)]
    spans_per_record: usize,
    /// Mean spans per trace.
    #[arg(long, default_value_t = 100)]
    spans_per_trace: usize,
    /// Record encoding.
    #[arg(long, value_enum, default_value_t = Encoding::OtlpProto)]
    encoding: Encoding,
    /// none, lz4, zstd, snappy or gzip.
    #[arg(long, default_value = "none")]
    compression: Compression,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Value of the `loadgen.id` attribute on every span (what `verify` looks for).
    #[arg(long, default_value = "loadgen")]
    generator_id: String,
    /// Leave partitioning to librdkafka (no key) instead of round-robin over partitions.
    #[arg(long)]
    keyless: bool,
    /// Number of services (resources).
    #[arg(long, default_value_t = 6)]
    services: usize,
    /// Approximate bytes of each free-text attribute value.
    #[arg(long, default_value_t = 32)]
    attribute_bytes: usize,
    /// Extra free-text string attributes per span.
    #[arg(long, default_value_t = 4)]
    extra_attributes: usize,
    /// At most this many events per span.
    #[arg(long, default_value_t = 2)]
    max_events: usize,
    /// At most this many links per span.
    #[arg(long, default_value_t = 1)]
    max_links: usize,
    /// What each span carries.
    #[arg(long, value_enum, default_value_t = Shape::Rich)]
    shape: Shape,
    /// Start time of the first trace in ns since the epoch (default: now). Pin it for
    /// byte-identical output across runs.
    #[arg(long)]
    start_time_ns: Option<u64>,
    /// Mean gap between trace starts in ms (fractions allowed); raise it to spread the spans
    /// over hours or days of timestamps.
    #[arg(long, default_value_t = 1.0)]
    trace_interval_ms: f64,
    /// Move each record in time so its latest span ends as it is sent (for measuring span
    /// end → queryable; with --rate, times then follow the wall clock).
    #[arg(long)]
    end_at_clock: bool,
    /// Hostile record: spread each record's spans over this many days (k-th span moved back
    /// k % N days), so one record needs N date partitions (over 100: ClickHouse refuses the
    /// insert block with code 252).
    #[arg(long, default_value_t = 0)]
    spread_days: u32,
    /// Hostile record: this many extra string attributes `resource.pad.<i>` on every
    /// resource (copied into every span's row by a row-per-span table).
    #[arg(long, default_value_t = 0)]
    pad_resource_attributes: usize,
    /// Bytes of each `resource.pad.<i>` value.
    #[arg(long, default_value_t = 4096)]
    pad_resource_bytes: usize,
    /// Extra librdkafka producer setting, `key=value` (repeatable).
    #[arg(short = 'X', value_parser = key_value)]
    kafka_config: Vec<(String, String)>,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    #[arg(long, env = "CLICKHOUSE_URL")]
    clickhouse_url: String,
    #[arg(long, env = "CLICKHOUSE_USER")]
    user: Option<String>,
    #[arg(long, env = "CLICKHOUSE_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// PEM CA bundle for an https:// URL (default: the system roots).
    #[arg(long = "clickhouse-ca-file", env = "CLICKHOUSE_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate for mutual TLS (needs --clickhouse-client-key).
    #[arg(long = "clickhouse-client-cert", env = "CLICKHOUSE_CLIENT_CERT")]
    client_cert: Option<std::path::PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "clickhouse-client-key", env = "CLICKHOUSE_CLIENT_KEY")]
    client_key: Option<std::path::PathBuf>,
    #[arg(long, default_value = "otel")]
    database: String,
    #[arg(long, default_value = "otel_traces")]
    table: String,
    /// Attribute columns of the table.
    #[arg(long, value_enum, default_value_t = Attributes::Map)]
    attributes: Attributes,
    /// Generator id to check (repeatable; the n-th pairs with the n-th --expected).
    #[arg(long, required = true)]
    generator_id: Vec<String>,
    /// Spans that generator produced (seq 0..N).
    #[arg(long, required = true)]
    expected: Vec<u64>,
    /// Deadline for each query, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_seconds: u64,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Produce(args) => run_produce(args).await.map(|()| ExitCode::SUCCESS),
        Command::Verify(args) => run_verify(args).await,
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::FAILURE
    })
}

async fn run_produce(a: ProduceArgs) -> Result<()> {
    let mut generator = GeneratorConfig {
        generator_id: a.generator_id,
        seed: a.seed,
        spans_per_trace: a.spans_per_trace,
        spans_per_record: a.spans_per_record,
        services: a.services,
        extra_span_attributes: a.extra_attributes,
        attribute_value_bytes: a.attribute_bytes,
        max_events_per_span: a.max_events,
        max_links_per_span: a.max_links,
        shape: a.shape,
        end_at_clock: a.end_at_clock,
        trace_interval_ns: (a.trace_interval_ms * 1e6).round() as u64,
        hostile: Hostile {
            spread_days: a.spread_days,
            pad_resource_attributes: a.pad_resource_attributes,
            pad_resource_bytes: a.pad_resource_bytes,
        },
        ..GeneratorConfig::default()
    };
    if let Some(t) = a.start_time_ns {
        generator.start_time_unix_nano = t;
    }
    let opts = ProduceOptions {
        brokers: a.brokers,
        topic: a.topic,
        partitions: a.partitions,
        replication_factor: a.replication_factor,
        spans: a.spans,
        rate: a.rate,
        encoding: a.encoding,
        compression: a.compression,
        partitioning: if a.keyless {
            Partitioning::Keyless
        } else {
            Partitioning::RoundRobin
        },
        generator,
        kafka_config: a.kafka_config,
    };
    let quiet = a.quiet;
    let mut last: Option<Progress> = None;
    let report = produce_with_progress(&opts, move |p| {
        if !quiet {
            print_progress(p, last.as_ref());
        }
        last = Some(*p);
    })
    .await
    .context("produce")?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

/// One line per second: progress, the rate over the last second, ETA at the average rate.
fn print_progress(p: &Progress, last: Option<&Progress>) {
    let (spans, bytes, secs) = match last {
        Some(l) => (
            p.spans - l.spans,
            p.bytes - l.bytes,
            (p.elapsed - l.elapsed).as_secs_f64(),
        ),
        None => (p.spans, p.bytes, p.elapsed.as_secs_f64()),
    };
    let secs = secs.max(1e-9);
    let eta = p
        .eta()
        .map_or_else(|| "?".to_string(), |d| format!("{:.1}s", d.as_secs_f64()));
    let _ = writeln!(
        std::io::stderr(),
        "produce: {}/{} spans ({:.1}%), {} records, {:.0} spans/s, {:.1} MB/s, eta {eta}",
        p.spans,
        p.total,
        100.0 * p.spans as f64 / p.total.max(1) as f64,
        p.records,
        spans as f64 / secs,
        bytes as f64 / secs / 1e6,
    );
}

async fn run_verify(a: VerifyArgs) -> Result<ExitCode> {
    if a.generator_id.len() != a.expected.len() {
        bail!(
            "{} --generator-id but {} --expected: give one --expected per generator",
            a.generator_id.len(),
            a.expected.len()
        );
    }
    let tls = tracehouse_schema::TlsConfig::from_files(
        a.ca_file.as_deref(),
        a.client_cert.as_deref(),
        a.client_key.as_deref(),
        false,
    )
    .context("ClickHouse TLS")?;
    let opts = VerifyOptions {
        url: a.clickhouse_url,
        user: a.user,
        password: a.password,
        tls,
        database: a.database,
        table: a.table,
        attributes: a.attributes,
        generators: a
            .generator_id
            .into_iter()
            .zip(a.expected)
            .map(|(generator_id, expected)| Expectation {
                generator_id,
                expected,
            })
            .collect(),
        timeout: Duration::from_secs(a.timeout_seconds),
    };
    let report = verify(&opts).await.context("verify")?;
    print_table(&report);
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::from(exit_code(&report)))
}

fn print_table(r: &VerifyReport) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "{}.{} ({} attributes)",
        r.database, r.table, r.attributes
    );
    let _ = writeln!(
        err,
        "{:<24} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "generator", "expected", "rows", "found", "missing", "duplicated", "out_of_range"
    );
    for g in &r.generators {
        let _ = writeln!(
            err,
            "{:<24} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            g.generator_id, g.expected, g.rows, g.found, g.missing, g.duplicated, g.out_of_range
        );
    }
}

/// The exit codes documented at the top of this file.
fn exit_code(r: &VerifyReport) -> u8 {
    match (r.missing() > 0, r.duplicated() > 0, r.out_of_range() > 0) {
        (false, false, false) => 0,
        (true, false, _) => 3,
        (false, true, _) => 4,
        (true, true, _) => 5,
        (false, false, true) => 6,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;
    use tracehouse_loadgen::GeneratorReport;

    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn encoding_and_attributes_take_the_collectors_spellings() {
        let parse = |line: &str| Cli::try_parse_from(line.split_whitespace());
        let produce = "loadgen produce --brokers b:1 --topic t --spans 1";
        let cli = parse(&format!("{produce} --encoding otlp_json --shape minimal")).unwrap();
        let Command::Produce(p) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!((p.encoding, p.shape), (Encoding::OtlpJson, Shape::Minimal));
        assert!(parse(&format!("{produce} --encoding json")).is_err());

        let verify = "loadgen verify --clickhouse-url http://c --generator-id g --expected 1";
        let cli = parse(&format!("{verify} --attributes json")).unwrap();
        let Command::Verify(v) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(v.attributes, Attributes::Json);
        assert!(parse(&format!("{verify} --attributes Map(String)")).is_err());
    }

    #[test]
    fn hostile_shapes_are_off_by_default_and_take_their_flags() {
        let parse = |line: &str| match Cli::try_parse_from(line.split_whitespace()) {
            Ok(Cli {
                command: Command::Produce(p),
            }) => p,
            other => panic!("{other:?}"),
        };
        let produce = "loadgen produce --brokers b:1 --topic t --spans 1";
        let p = parse(produce);
        assert_eq!((p.spread_days, p.pad_resource_attributes), (0, 0));
        let p = parse(&format!(
            "{produce} --spread-days 101 --pad-resource-attributes 100 --pad-resource-bytes 4096"
        ));
        assert_eq!(
            (
                p.spread_days,
                p.pad_resource_attributes,
                p.pad_resource_bytes
            ),
            (101, 100, 4096)
        );
    }

    #[test]
    fn exit_codes_distinguish_loss_and_duplicates() {
        let report = |missing, duplicated, out_of_range| VerifyReport {
            database: "d".into(),
            table: "t".into(),
            attributes: Attributes::Map,
            generators: vec![GeneratorReport {
                generator_id: "g".into(),
                expected: 10,
                rows: 10,
                found: 10 - missing,
                missing,
                duplicated,
                out_of_range,
            }],
        };
        assert_eq!(exit_code(&report(0, 0, 0)), 0);
        assert_eq!(exit_code(&report(1, 0, 0)), 3);
        assert_eq!(exit_code(&report(0, 1, 0)), 4);
        assert_eq!(exit_code(&report(1, 1, 1)), 5);
        assert_eq!(exit_code(&report(0, 0, 1)), 6);
    }
}
