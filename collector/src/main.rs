//! `tracehouse-collector`: the gateway collector binary.
//!
//! Each subcommand lives in its own module under `cmd/`; this file only parses
//! the command line and dispatches.

mod cmd;

/// mimalloc instead of glibc malloc: records are copied on the Kafka thread, decoded and
/// encoded on worker threads and freed on the async runtime; glibc's per-arena locking and
/// page churn cost ~15 % of CPU in profiles of the whole process (see collector/README.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// Moves OpenTelemetry trace spans from Kafka into ClickHouse, at least once.
#[derive(Debug, Parser)]
#[command(name = "tracehouse-collector", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Consume OTLP spans from Kafka and insert them into ClickHouse, at least once.
    Run(cmd::run::RunArgs),
    /// Manage the ClickHouse traces table (print DDL, plan and apply migrations).
    Schema(cmd::schema::SchemaArgs),
    /// Serve only the health endpoints (`/healthz`, `/readyz`); used to test pod plumbing.
    #[command(hide = true)]
    ServeHealth(cmd::serve_health::ServeHealthArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::Schema(args) => cmd::schema::run(args),
        Command::ServeHealth(args) => cmd::serve_health::run(args),
    }
}
