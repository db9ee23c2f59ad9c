//! Helpers shared by the end-to-end tests: where the local stack is, and throw-away names.
//!
//! Every address and credential comes from the environment variables printed by
//! `e2e/stack env`; a missing one fails the test with the command that fixes it, so a
//! test can never pass by not running.

use std::time::{SystemTime, UNIX_EPOCH};

pub mod k8s;

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
