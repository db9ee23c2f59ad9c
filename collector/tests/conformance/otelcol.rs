//! The OpenTelemetry Collector of the differential tests: its binary (`TRACEHOUSE_OTELCOL_BIN`,
//! built by `e2e/otelcol/build`), run as a child process with `e2e/otelcol/config.yaml` and
//! any overlay (`e2e/otelcol/processing.yaml`), and its database.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tracehouse_loadgen::Encoding;

use crate::common::{free_port, tail, var};

/// Path of the OpenTelemetry Collector binary, or a failure saying how to build it.
pub fn otelcol_bin() -> PathBuf {
    let hint = "build the OpenTelemetry Collector and export its path: \
                `export TRACEHOUSE_OTELCOL_BIN=$(e2e/otelcol/build)` (cached after the first \
                build, about 5 min cold), or run `e2e/test`, which does both";
    let path = match std::env::var("TRACEHOUSE_OTELCOL_BIN") {
        Ok(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!("TRACEHOUSE_OTELCOL_BIN is not set: {hint}"),
    };
    assert!(
        path.is_file(),
        "TRACEHOUSE_OTELCOL_BIN={} is not a file: {hint}",
        path.display()
    );
    path
}

/// The OpenTelemetry Collector running as a child process, killed on drop.
pub struct Otelcol {
    child: Child,
    log: PathBuf,
}

impl Otelcol {
    /// Runs `bin` with `e2e/otelcol/config.yaml` and then each of `overlays` (files under
    /// `e2e/otelcol/`, merged over it as the Collector merges `--config` files).
    pub fn start(
        bin: &Path,
        topic: &str,
        database: &str,
        json: bool,
        encoding: Encoding,
        overlays: &[&str],
    ) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../e2e/otelcol");
        let config = dir.join("config.yaml");
        let group = tracehouse_e2e::unique_name("group_otelcol");
        let log = std::env::temp_dir().join(format!("{group}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .args(
                overlays
                    .iter()
                    .flat_map(|o| ["--config".into(), dir.join(o)]),
            )
            .env("KAFKA_BROKERS", var("KAFKA_BROKERS"))
            .env("CLICKHOUSE_URL", var("CLICKHOUSE_URL"))
            .env("CLICKHOUSE_USER", var("CLICKHOUSE_USER"))
            .env("CLICKHOUSE_PASSWORD", var("CLICKHOUSE_PASSWORD"))
            .env("BENCH_TOPIC", topic)
            .env("BENCH_GROUP", &group)
            .env("BENCH_DATABASE", database)
            .env("BENCH_OTEL_JSON", if json { "true" } else { "false" })
            .env("BENCH_METRICS_PORT", free_port().to_string())
            .env("BENCH_ENCODING", encoding.as_str())
            // One batch per record: a batch the exporter refuses loses only that record.
            .env("BENCH_SEND_BATCH_SIZE", "1")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start the OpenTelemetry Collector");
        Self { child, log }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_tail(&self) -> String {
        tail(&self.log(), 30)
    }
}

impl Drop for Otelcol {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The OpenTelemetry Collector's database, dropped after a passing test like a [`World`]'s.
pub struct OtelcolDatabase(pub String);

impl Drop for OtelcolDatabase {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for a look: database {}", self.0);
            return;
        }
        let database = self.0.clone();
        tracehouse_e2e::block_on_cleanup(async move {
            tracehouse_e2e::drop_database(&database).await;
        });
    }
}

pub async fn create_topic(topic: &str) {
    use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
    let results = tracehouse_e2e::kafka_admin()
        .create_topics(
            &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create topic");
    for r in results {
        r.expect("create topic");
    }
}
