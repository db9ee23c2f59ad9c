//! `tracehouse-operator`: reconciles `TracePipeline` resources.

use clap::Parser;

/// Reconciles TracePipeline resources into schema migrations and a gateway collector fleet.
#[derive(Debug, Parser)]
#[command(name = "tracehouse-operator", version, about)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    anyhow::bail!("the reconciler is not implemented yet")
}
