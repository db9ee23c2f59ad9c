//! Helpers shared by the end-to-end tests: where the local stack is, and throw-away names.
//!
//! Every address and credential comes from the environment variables printed by
//! `e2e/stack env`; a missing one fails the test with the command that fixes it, so a
//! test can never pass by not running.

use std::time::{SystemTime, UNIX_EPOCH};

pub mod grafana;
pub mod k8s;
pub mod oidc;

/// The value of a stack variable, or a panic explaining how to get it.
pub fn stack_var(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: start the local stack and load its environment with \
             `e2e/stack up && eval \"$(e2e/stack env)\"` (or run `e2e/test`)"
        ),
    }
}

/// Kafka bootstrap servers of the local stack.
pub fn kafka_brokers() -> String {
    stack_var("KAFKA_BROKERS")
}

/// A ClickHouse client for the local stack's HTTP endpoint, authenticated, LZ4 on.
pub fn clickhouse() -> clickhouse::Client {
    clickhouse::Client::default()
        .with_url(stack_var("CLICKHOUSE_URL"))
        .with_user(stack_var("CLICKHOUSE_USER"))
        .with_password(stack_var("CLICKHOUSE_PASSWORD"))
        .with_compression(clickhouse::Compression::Lz4)
}

/// An admin client for the local stack's Kafka.
pub fn kafka_admin() -> rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_brokers())
        .create()
        .expect("kafka admin client")
}

/// Deletes `topics` (those that exist) and reports, without failing, any it could not:
/// cleanup after a test must not hide the test's own outcome.
pub async fn delete_topics(topics: &[&str]) {
    use rdkafka::types::RDKafkaErrorCode;
    match kafka_admin()
        .delete_topics(topics, &rdkafka::admin::AdminOptions::new())
        .await
    {
        Ok(results) => {
            for r in results {
                if let Err((topic, code)) = r
                    && code != RDKafkaErrorCode::UnknownTopicOrPartition
                {
                    eprintln!("cleanup: cannot delete topic {topic}: {code}");
                }
            }
        }
        Err(e) => eprintln!("cleanup: cannot delete topics {topics:?}: {e}"),
    }
}

/// Drops `database` on the local stack's ClickHouse, reporting (not failing) an error.
pub async fn drop_database(database: &str) {
    if let Err(e) = clickhouse()
        .query(&format!("DROP DATABASE IF EXISTS `{database}`"))
        .execute()
        .await
    {
        eprintln!("cleanup: cannot drop database {database}: {e}");
    }
}

/// Runs `cleanup` to completion from synchronous code such as a `Drop`, also inside a
/// Tokio runtime (on a thread of its own, with its own runtime).
pub fn block_on_cleanup<F>(cleanup: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let done = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cleanup runtime")
            .block_on(cleanup);
    })
    .join();
    if done.is_err() {
        eprintln!("cleanup: panicked");
    }
}

/// A name unique to this test run, safe as a ClickHouse identifier and a Kafka topic.
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{prefix}_{}_{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// Put the stack's operator release back as `e2e/stack up` installs it (`k8s_operator_up`):
/// what a test that reinstalls the chart its own way runs at its end, pass or fail.
pub fn restore_stack_operator() -> String {
    run_repo_command(&[
        "bash",
        "-c",
        "source e2e/lib/common.sh && source e2e/lib/clickhouse.sh && source e2e/lib/k8s.sh && k8s_operator_up",
    ])
}

/// Run a shell command from the repository root, failing the test on a non-zero exit.
pub fn run_repo_command(args: &[&str]) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} failed with {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
