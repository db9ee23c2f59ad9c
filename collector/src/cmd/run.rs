//! `tracehouse-collector run`: consume OTLP spans from Kafka and insert them into ClickHouse.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracehouse_collector::config::{Attributes, Config, Encoding};
use tracehouse_collector::metrics::Metrics;

/// Flags override the YAML file; the file overrides the defaults.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// YAML configuration file.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Kafka bootstrap servers (host:port,…).
    #[arg(long, env = "KAFKA_BROKERS")]
    kafka_brokers: Option<String>,
    /// Topic to consume (repeatable). Default: otlp_spans.
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// Kafka consumer group.
    #[arg(long)]
    group_id: Option<String>,
    /// Record encoding on the topic.
    #[arg(long, value_enum)]
    encoding: Option<Encoding>,
    /// Copy undecodable, oversized or rejected records to this topic.
    #[arg(long)]
    dead_letter_topic: Option<String>,
    /// ClickHouse HTTP endpoint.
    #[arg(long, env = "CLICKHOUSE_URL")]
    clickhouse_url: Option<String>,
    /// ClickHouse database.
    #[arg(long)]
    database: Option<String>,
    /// Traces table.
    #[arg(long)]
    table: Option<String>,
    /// Attribute columns' type in the table.
    #[arg(long, value_enum)]
    attributes: Option<Attributes>,
    /// File with the ClickHouse password (otherwise CLICKHOUSE_PASSWORD).
    #[arg(long)]
    password_file: Option<PathBuf>,
    #[command(flatten)]
    clickhouse_tls: super::ClickHouseTlsArgs,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// How long SIGTERM may take (milliseconds).
    #[arg(long)]
    shutdown_deadline_ms: Option<u64>,
    /// Print the effective configuration (password never included) and exit.
    #[arg(long)]
    print_config: bool,
    /// Log format.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
}

impl RunArgs {
    fn apply(&self, cfg: &mut Config) {
        if let Some(v) = &self.kafka_brokers {
            cfg.kafka.brokers = v.clone();
        }
        if !self.topics.is_empty() {
            cfg.kafka.topics = self.topics.clone();
        }
        if let Some(v) = &self.group_id {
            cfg.kafka.group_id = v.clone();
        }
        if let Some(v) = self.encoding {
            cfg.kafka.encoding = v;
        }
        if let Some(v) = &self.dead_letter_topic {
            cfg.kafka.dead_letter_topic = Some(v.clone());
        }
        if let Some(v) = &self.clickhouse_url {
            cfg.clickhouse.url = v.clone();
        }
        if let Some(v) = &self.database {
            cfg.clickhouse.database = v.clone();
        }
        if let Some(v) = &self.table {
            cfg.clickhouse.table = v.clone();
        }
        if let Some(v) = self.attributes {
            cfg.clickhouse.attributes = v;
        }
        if let Some(v) = &self.password_file {
            cfg.clickhouse.password_file = Some(v.clone());
        }
        self.clickhouse_tls.apply(&mut cfg.clickhouse.tls);
        if let Some(v) = self.metrics_addr {
            cfg.metrics_addr = v;
        }
        if let Some(v) = self.shutdown_deadline_ms {
            cfg.shutdown_deadline_ms = v;
        }
        // SASL credentials come from the environment (the operator maps them from a Secret),
        // so they never sit in a ConfigMap or on the command line.
        for (var, key) in [
            ("KAFKA_SASL_USERNAME", "sasl.username"),
            ("KAFKA_SASL_PASSWORD", "sasl.password"),
        ] {
            if let Ok(v) = std::env::var(var)
                && !v.is_empty()
            {
                cfg.kafka.properties.entry(key.to_string()).or_insert(v);
            }
        }
    }
}

pub fn run(args: RunArgs) -> ExitCode {
    tracehouse_collector::init_logging(&args.log_format);
    let mut cfg = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    args.apply(&mut cfg);
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if args.print_config {
        let mut shown = cfg.clone();
        for secret in ["sasl.password", "ssl.key.password", "ssl.keystore.password"] {
            if let Some(v) = shown.kafka.properties.get_mut(secret) {
                *v = "***".into();
            }
        }
        print!(
            "{}",
            tracehouse_collector::yaml::to_string(&shown).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let factory = match tracehouse_collector::insert::encoder::factory(&cfg, &metrics) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    tracehouse_collector::insert::sink::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("io")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        tracing::info!(
            brokers = %cfg.kafka.brokers, topics = ?cfg.kafka.topics, group = %cfg.kafka.group_id,
            clickhouse = %cfg.clickhouse.url, database = %cfg.clickhouse.database, table = %cfg.clickhouse.table,
            "starting tracehouse-collector {}", env!("CARGO_PKG_VERSION")
        );
        tracehouse_collector::pipeline::run(cfg, factory, registry, metrics, shutdown_signal()).await
    });
    // Threads blocked on the network (a Kafka broker that is down) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
