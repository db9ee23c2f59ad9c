//! `tracehouse-collector`: the gateway collector binary.
//!
//! Each subcommand lives in its own module under `cmd/`; this file only parses
//! the command line and dispatches.

mod cmd;

// The system allocator (glibc malloc), not mimalloc. mimalloc was chosen when batches and
// bodies were allocated and freed per batch; since they are pooled (pool.rs) the process
// allocates little, and mimalloc v3 kept freed memory committed for its 1 s purge delay.
// Against an e2e/bench topic of 1 M full spans (map attributes), glibc gave a peak RSS of
// 168 MiB against 229-232 MiB at the same CPU (4.92-5.10 s against 5.17-5.29 s); on 2 M
// minimal spans 152-157 MiB against 203-213 MiB, with 13 % less CPU (1.88-1.93 s against
// 2.20-2.24 s).

use clap::{Parser, Subcommand};

/// Moves OpenTelemetry trace spans from Kafka into ClickHouse, at least once.
#[derive(Debug, Parser)]
#[command(name = "tracehouse-collector", version, about)]
#[command(arg_required_else_help = true, args_conflicts_with_subcommands = true)]
struct Cli {
    /// Print the collector configuration revision this build knows and exit (the operator
    /// renders only keys of this revision or older: docs/upgrade.md).
    #[arg(long)]
    config_revision: bool,
    #[command(subcommand)]
    command: Option<Command>,
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
        _ if cli.config_revision => {
            println!("{}", tracehouse_contract::revision::CONFIG_REVISION);
            std::process::ExitCode::SUCCESS
        }
        Some(Command::Run(args)) => cmd::run::run(args),
        Some(Command::Schema(args)) => cmd::schema::run(args),
        Some(Command::ServeHealth(args)) => cmd::serve_health::run(args),
        None => {
            use clap::CommandFactory;
            Cli::command()
                .error(
                    clap::error::ErrorKind::MissingSubcommand,
                    "a subcommand (or --config-revision) is needed",
                )
                .exit()
        }
    }
}
