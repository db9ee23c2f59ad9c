//! `tracehouse-operator`: reconciles `TracePipeline` resources (`run`), and prints or checks
//! the CRD generated from the Rust types (`crd`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser, Subcommand};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracehouse_operator::defaults::CollectorDefaults;
use tracehouse_operator::endpoints::AllowList;
use tracehouse_operator::leader::{Ended, LeaderElector, LeaseConfig};
use tracehouse_operator::listen;
use tracehouse_operator::metrics::{self, Metrics};
use tracehouse_operator::reconcile::{self, Context, Settings, Watch};
use tracehouse_operator::{FIELD_MANAGER, crd, crd_apply};

/// Reconciles TracePipeline resources into schema migrations and a gateway collector fleet.
#[derive(Debug, Parser)]
#[command(name = "tracehouse-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller (with leader election, /metrics and /healthz).
    Run(Box<RunArgs>),
    /// Print the TracePipeline CustomResourceDefinition as YAML, or check a file against it.
    Crd(CrdArgs),
}

#[derive(Debug, clap::Args)]
struct CrdArgs {
    /// Compare FILE with the generated CRD instead of printing it; exit 1 when it is stale.
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// Print the schema's fingerprint and revision (`<revision> <fingerprint>`, the line
    /// operator/src/crd/revisions.txt records; `operator/gen-crds` appends it when new).
    #[arg(long, conflicts_with = "check")]
    fingerprint: bool,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Address of /metrics, /healthz and /readyz: IP:PORT, [IPv6]:PORT or IPv6:PORT (an
    /// expanded `$(POD_IP):8080`); `[::]` is every IPv4 and IPv6 address.
    #[arg(
        long,
        env = "TRACEHOUSE_OPERATOR_METRICS_ADDR",
        default_value = "[::]:8080",
        value_parser = listen::parse_listen_addr
    )]
    metrics_addr: SocketAddr,
    /// Take part in leader election on a Lease, so only one replica reconciles.
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "tracehouse-operator")]
    lease_name: String,
    /// This replica's identity in the Lease and in Events (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Namespaced mode: watch TracePipelines and the objects they own only in these
    /// namespaces (comma-separated or repeated); with neither this nor --namespace, every
    /// namespace.
    #[arg(long, env = "TRACEHOUSE_OPERATOR_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// One more namespace to watch (the older one-namespace flag; added to --namespaces).
    #[arg(long, env = "TRACEHOUSE_OPERATOR_NAMESPACE")]
    namespace: Option<String>,
    /// Kafka bootstrap and ClickHouse hosts a pipeline may name (comma-separated: host, IP,
    /// or `*.suffix`); a pipeline naming another is refused. Default: any host.
    #[arg(
        long,
        env = "TRACEHOUSE_OPERATOR_ALLOWED_ENDPOINTS",
        value_delimiter = ','
    )]
    allowed_endpoints: Vec<String>,
    /// Requeue period of a healthy pipeline: how soon a partition increase is noticed.
    #[arg(long, default_value_t = 30)]
    requeue_seconds: u64,
    /// Deadline of one Kafka metadata read.
    #[arg(long, default_value_t = 10)]
    kafka_timeout_seconds: u64,
    /// Log format.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
    /// The chart's defaults for every gateway, as JSON (image, upgradePolicy,
    /// imagePullSecrets, serviceAccountName, nodeSelector, tolerations, affinity,
    /// topologySpreadConstraints, priorityClassName, podAnnotations, podLabels).
    #[arg(long, env = tracehouse_operator::defaults::ENV, default_value = "")]
    collector_defaults: String,
    /// At start, apply this build's TracePipeline CRD when the cluster's is an older revision
    /// (never a newer one: a rollback leaves it). Needs get and patch on the CRD (the chart's
    /// `crds.enabled`, cluster mode).
    #[arg(long, env = "TRACEHOUSE_OPERATOR_CRD_UPGRADE", default_value_t = false, action = ArgAction::Set)]
    crd_upgrade: bool,
    /// Extra annotations of the CRD when it is applied, as a JSON object (the chart's
    /// `crds.annotations`).
    #[arg(long, env = "TRACEHOUSE_OPERATOR_CRD_ANNOTATIONS", default_value = "")]
    crd_annotations: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd(args) => print_or_check_crd(&args),
        Command::Run(args) => {
            tracehouse_contract::telemetry::init_logging(&args.log_format);
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("{e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn print_or_check_crd(args: &CrdArgs) -> ExitCode {
    let fingerprint = crd::revision::fingerprint(&crd::crd_unrevised());
    if args.fingerprint {
        println!("{} {fingerprint}", crd::revision::revision_of(&fingerprint));
        return ExitCode::SUCCESS;
    }
    if args.check.is_some() && !crd::revision::is_recorded_last(&fingerprint) {
        eprintln!(
            "operator/src/crd/revisions.txt does not record the CRD's schema as its last \
             revision. Run `operator/gen-crds` and commit."
        );
        return ExitCode::FAILURE;
    }
    let generated = crd::crd_yaml();
    let Some(path) = &args.check else {
        print!("{generated}");
        return ExitCode::SUCCESS;
    };
    match std::fs::read_to_string(path) {
        Ok(committed) if committed == generated => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!(
                "{} is stale: it differs from the CRD the Rust types generate. \
                 Run `operator/gen-crds` and commit.",
                path.display()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "cannot read {}: {e}. Run `operator/gen-crds` and commit.",
                path.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{host}-{}", std::process::id())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (KUBECONFIG or in-cluster)")?;
    let watch = Watch::from_names(args.namespaces.iter().chain(&args.namespace));
    if args.crd_upgrade {
        let annotations: BTreeMap<String, String> = if args.crd_annotations.trim().is_empty() {
            BTreeMap::new()
        } else {
            serde_json::from_str(&args.crd_annotations).context(
                "--crd-annotations (TRACEHOUSE_OPERATOR_CRD_ANNOTATIONS) is not a JSON object \
                 of strings",
            )?
        };
        crd_apply::log(&crd_apply::keep_current(&client, &annotations).await);
    }
    reconcile::check_crd(&client, &watch).await?;

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;
    let server = tokio::spawn(metrics::serve(
        args.metrics_addr,
        registry,
        metrics.clone(),
        shutdown.clone(),
    ));

    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        Settings {
            requeue: Duration::from_secs(args.requeue_seconds.max(1)),
            kafka_timeout: Duration::from_secs(args.kafka_timeout_seconds.max(1)),
            identity: identity.clone(),
            collector_defaults: CollectorDefaults::from_json(&args.collector_defaults)?,
            allowed_endpoints: AllowList::new(&args.allowed_endpoints),
            ..Settings::default()
        },
    )?);
    tracing::info!(
        %identity, namespaces = %watch,
        "starting {FIELD_MANAGER} {}", env!("CARGO_PKG_VERSION")
    );

    let outcome = if args.leader_elect {
        let mut elector = LeaderElector::new(
            client,
            LeaseConfig::new(&args.lease_namespace, &args.lease_name, &identity),
        );
        tracing::info!(lease = %format!("{}/{}", args.lease_namespace, args.lease_name), "waiting to lead");
        if elector.acquire(&shutdown).await {
            tracing::info!("leading: reconciling");
            metrics.leader.set(1);
            let stop = shutdown.child_token();
            let controller = tokio::spawn(reconcile::run(ctx, watch, stop.clone()));
            let ended = elector.hold(&shutdown).await;
            stop.cancel();
            // In-flight reconciles finish (bounded) before the Lease is handed over.
            if tokio::time::timeout(Duration::from_secs(20), controller)
                .await
                .is_err()
            {
                tracing::warn!("the controller did not stop within 20s");
            }
            metrics.leader.set(0);
            match ended {
                Ended::Shutdown => {
                    elector.release().await;
                    Ok(())
                }
                Ended::Lost => {
                    metrics.alive.store(false, Ordering::Relaxed);
                    Err(anyhow::anyhow!(
                        "lost the leader Lease; exiting so that a fresh start competes again"
                    ))
                }
            }
        } else {
            Ok(())
        }
    } else {
        reconcile::run(ctx, watch, shutdown.clone()).await;
        Ok(())
    };
    shutdown.cancel();
    match server.await {
        Ok(Err(e)) => return Err(e).context("the metrics server failed"),
        Err(e) => tracing::warn!(error = %e, "the metrics server task failed"),
        Ok(Ok(())) => {}
    }
    outcome
}

fn spawn_signal_handler(shutdown: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: stopping"),
            _ = int.recv() => tracing::info!("SIGINT: stopping"),
        }
        shutdown.cancel();
    });
    Ok(())
}
