//! Harness of the collector's end-to-end tests: the real local stack (Kafka, the ClickHouse
//! engine behind its HTTP interface), the real collector binary as a child process, and
//! the load generator's spans with their verification.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tracehouse_e2e::unique_name;
use tracehouse_loadgen::{
    Expectation, GeneratorConfig, ProduceOptions, VerifyOptions, VerifyReport,
};
pub use tracehouse_schema::Attributes;

/// A stack variable (`tracehouse_e2e::stack_var`), with rustls' crypto provider installed
/// first for the collector library's HTTP clients.
pub fn var(name: &str) -> String {
    tracehouse_collector::insert::sink::install_crypto_provider();
    tracehouse_e2e::stack_var(name)
}

/// A free loopback port for the collector's metrics endpoint.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The collector binary the tests run: this build's, or `TRACEHOUSE_TEST_COLLECTOR_BIN` (an
/// older release, to show a test fails without the fix it guards).
pub fn collector_bin() -> String {
    std::env::var("TRACEHOUSE_TEST_COLLECTOR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_tracehouse-collector").to_string())
}

/// Create the traces table (all migrations) with the collector's own `schema apply`.
pub fn create_table(database: &str, table: &str, attributes: Attributes) {
    let out = Command::new(collector_bin())
        .args([
            "schema",
            "apply",
            "--database",
            database,
            "--table",
            table,
            "--attributes",
            attributes.as_str(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "schema apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One test's world: its topic, group, database and table. Dropped after a passing test,
/// it deletes its topics (the topic, and `<topic>_dlq` if a test made one) and its
/// database; after a failing test it keeps them for a look.
pub struct World {
    pub topic: String,
    pub group: String,
    pub database: String,
    pub table: String,
    pub attributes: Attributes,
    pub generator: String,
}

impl World {
    pub fn new(name: &str, attributes: Attributes) -> Self {
        let database = unique_name(&format!("e2e_{name}"));
        let w = Self {
            topic: unique_name(&format!("spans_{name}")),
            group: unique_name(&format!("group_{name}")),
            table: "otel_traces".into(),
            database,
            attributes,
            generator: unique_name(name),
        };
        create_table(&w.database, &w.table, attributes);
        w
    }

    /// Produce `spans` spans (100 per record) over `partitions` partitions.
    pub async fn produce(&self, spans: u64, partitions: i32, seed: u64) {
        self.produce_as(&self.generator, spans, partitions, seed)
            .await;
    }

    /// Produce as another generator id (its own seq numbering).
    pub async fn produce_as(&self, generator_id: &str, spans: u64, partitions: i32, seed: u64) {
        self.produce_to(&var("KAFKA_BROKERS"), generator_id, spans, partitions, seed)
            .await;
    }

    /// Produce as `generator_id` to this world's topic on the cluster at `brokers`.
    pub async fn produce_to(
        &self,
        brokers: &str,
        generator_id: &str,
        spans: u64,
        partitions: i32,
        seed: u64,
    ) {
        let opts = ProduceOptions {
            brokers: brokers.to_string(),
            topic: self.topic.clone(),
            partitions,
            spans,
            generator: GeneratorConfig {
                generator_id: generator_id.to_string(),
                seed,
                spans_per_record: 100,
                ..GeneratorConfig::default()
            },
            ..ProduceOptions::default()
        };
        tracehouse_loadgen::produce(&opts).await.expect("produce");
    }

    /// Produce raw records (e.g. poison) to a partition.
    pub async fn produce_raw(&self, partition: i32, payloads: &[Vec<u8>]) {
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let producer: FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", var("KAFKA_BROKERS"))
            .set("message.max.bytes", "33554432")
            .create()
            .unwrap();
        for p in payloads {
            producer
                .send(
                    FutureRecord::<(), _>::to(&self.topic)
                        .partition(partition)
                        .payload(p),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("produce raw");
        }
    }

    pub async fn verify(&self, expected: u64) -> VerifyReport {
        self.verify_as(&self.generator, expected).await
    }

    pub async fn verify_as(&self, generator_id: &str, expected: u64) -> VerifyReport {
        let opts = VerifyOptions {
            url: var("CLICKHOUSE_URL"),
            user: Some(var("CLICKHOUSE_USER")),
            password: Some(var("CLICKHOUSE_PASSWORD")),
            tls: Default::default(),
            database: self.database.clone(),
            table: self.table.clone(),
            attributes: self.attributes,
            generators: vec![Expectation {
                generator_id: generator_id.to_string(),
                expected,
            }],
            timeout: Duration::from_secs(60),
        };
        tracehouse_loadgen::verify(&opts).await.expect("verify")
    }

    pub async fn count_rows(&self) -> u64 {
        let sql = format!("SELECT count() FROM `{}`.`{}`", self.database, self.table);
        query(&sql).await.trim().parse().unwrap_or(0)
    }

    /// Wait until the table holds at least `rows` rows.
    pub async fn wait_rows(&self, rows: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.count_rows().await;
            if n >= rows || Instant::now() > deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Start the collector on this world's topic.
    pub fn start_collector(&self, extra: &[&str]) -> Collector {
        Collector::start(self, extra)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "kept for a look: topic {}, database {}",
                self.topic, self.database
            );
            return;
        }
        let topic = self.topic.clone();
        let dlq = format!("{topic}_dlq");
        let database = self.database.clone();
        tracehouse_e2e::block_on_cleanup(async move {
            tracehouse_e2e::delete_topics(&[&topic, &dlq]).await;
            tracehouse_e2e::drop_database(&database).await;
        });
    }
}

/// Run a query on the stack's ClickHouse, returning the TSV body.
pub async fn query(sql: &str) -> String {
    let url = var("CLICKHOUSE_URL"); // installs the crypto provider the client needs
    let resp = reqwest::Client::new()
        .post(url)
        .header("X-ClickHouse-User", var("CLICKHOUSE_USER"))
        .header("X-ClickHouse-Key", var("CLICKHOUSE_PASSWORD"))
        .body(sql.to_string())
        .send()
        .await
        .expect("clickhouse query");
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert!(status.is_success(), "{sql}: {text}");
    text
}

/// The collector binary running as a child process.
pub struct Collector {
    pub child: Child,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Collector {
    pub fn start(w: &World, extra: &[&str]) -> Self {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("{}-collector-{port}.log", w.generator));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(collector_bin())
            .args(["run", "--topic", &w.topic, "--group-id", &w.group])
            .args([
                "--database",
                &w.database,
                "--table",
                &w.table,
                "--attributes",
                w.attributes.as_str(),
            ])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .env("RUST_LOG", "info,librdkafka=warn")
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("start collector");
        Self {
            child,
            metrics_port: port,
            log,
        }
    }

    /// Polls the metrics until `pred` holds; fails after `timeout` with `what`, the
    /// metrics and the log.
    pub async fn wait_metrics(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let m = self.metrics().await;
            if pred(&m) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}; metrics:\n{m}\nlog:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    pub async fn metrics(&self) -> String {
        match reqwest::get(format!("http://127.0.0.1:{}/metrics", self.metrics_port)).await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// Sum of a metric's samples whose line starts with `prefix` (name plus optional labels).
    pub async fn metric_sum(&self, prefix: &str) -> f64 {
        sum_metric(&self.metrics().await, prefix)
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn sigterm(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Wait for the process to exit; returns how long it took, or None past the timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<(Duration, std::process::ExitStatus)> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some((start.elapsed(), status));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn log_tail(&self) -> String {
        tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 40)
    }
}

/// The last `lines` lines of a log's text.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn sum_metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
