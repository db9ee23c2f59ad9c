//! `tracehouse-node-agent`: the kubelet (and scheduler) of the e2e stack.
//!
//! It registers one Ready Node, binds pending pods to it, and runs each container of those
//! pods from its image in local image storage: the image's root filesystem, chrooted in new
//! PID, mount and UTS namespaces. See `e2e/node-agent/README.md`.

mod binder;
mod ctx;
mod env;
mod health;
mod images;
mod ips;
mod node;
mod pods;
mod probe;
mod process;
mod runspec;
mod sandbox;
mod sources;
mod spdy;
mod status;
mod streaming;
mod volumes;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Recorder, Reporter};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::ctx::{Backoff, Ctx};
use crate::images::ImageStore;
use crate::ips::IpPool;
use crate::node::NodeHealth;

/// Runs pods from the images in local image storage on a Node of its own.
#[derive(Debug, Parser)]
#[command(name = "tracehouse-node-agent", version, about)]
struct Args {
    /// Kubeconfig of the node agent's identity (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Name of the Node this agent registers.
    #[arg(long, env = "TRACEHOUSE_NODE_NAME", default_value = "tracehouse-node")]
    node_name: String,
    /// The podman image storage pods run from (`storage/` and `run/` inside, vfs driver).
    #[arg(long)]
    image_store: PathBuf,
    /// Pod working directories, unpacked images and process records live here.
    #[arg(long)]
    state_dir: PathBuf,
    /// Container logs (`<namespace>_<pod>_<container>.log`) go here.
    #[arg(long)]
    log_dir: PathBuf,
    /// Loopback addresses handed out as pod IPs, FIRST-LAST.
    #[arg(long, default_value = "127.0.0.2-127.0.0.254")]
    pod_ip_range: String,
    /// Address of the agent's /healthz and /readyz.
    #[arg(long, default_value = "127.0.0.1:16445")]
    health_addr: SocketAddr,
    /// First restart delay of a crashed container; doubles per restart.
    #[arg(long, default_value_t = 2)]
    restart_backoff_secs: u64,
    /// Longest restart delay.
    #[arg(long, default_value_t = 60)]
    restart_backoff_max_secs: u64,
    /// Longest grace period a pod gets when the agent itself stops.
    #[arg(long, default_value_t = 20)]
    shutdown_grace_secs: u64,
    /// Reported as the Node's kubeletVersion.
    #[arg(long, default_value = "v1.36.3")]
    kubelet_version: String,
    /// Port of the kubelet HTTPS server on the node's address (port-forward), reported as
    /// the Node's kubelet endpoint. Needs the three TLS flags below.
    #[arg(long, requires_all = ["tls_cert_file", "tls_private_key_file", "client_ca_file"])]
    kubelet_port: Option<u16>,
    /// Serving certificate of the kubelet port (PEM, chain first).
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// CA that client certificates (the API server's kubelet client) must chain to.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    // `unshare` runs this binary again as a container's init (see `sandbox`): no runtime, no
    // threads, then exec.
    let mut argv = std::env::args();
    if argv.nth(1).as_deref() == Some(sandbox::INIT_ARG) {
        sandbox::init(&argv.next().unwrap_or_default());
    }
    tokio::runtime::Runtime::new()?.block_on(agent())
}

async fn agent() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let kubelet_tls = match (
        args.kubelet_port,
        &args.tls_cert_file,
        &args.tls_private_key_file,
        &args.client_ca_file,
    ) {
        (Some(port), Some(cert), Some(key), Some(ca)) => {
            let files = streaming::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: ca.clone(),
            };
            Some((port, streaming::tls_config(&files)?))
        }
        _ => None,
    };

    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let server = config.cluster_url.to_string();
    let client = kube::Client::try_from(config)?;
    let images = ImageStore::new(&args.image_store, args.state_dir.join("images"));
    let pool: IpPool = args.pod_ip_range.parse()?;
    let pods_dir = args.state_dir.join("pods");
    let pids_dir = args.state_dir.join("pids");
    for dir in [&pods_dir, &pids_dir, &args.log_dir] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let killed = process::kill_leftovers(&pids_dir);
    if !killed.is_empty() {
        tracing::warn!(
            ?killed,
            "killed container processes left behind by an earlier node agent"
        );
    }
    let capacity = {
        let (a, b) = args.pod_ip_range.split_once('-').unwrap_or_default();
        let n = |s: &str| s.trim().parse::<Ipv4Addr>().map(u32::from).unwrap_or(0);
        n(b).saturating_sub(n(a)) + 1
    };
    let reporter = Reporter {
        controller: "tracehouse-node-agent".into(),
        instance: Some(args.node_name.clone()),
    };
    let ctx = Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        node_name: args.node_name.clone(),
        kubelet_version: args.kubelet_version.clone(),
        kubelet_port: kubelet_tls.as_ref().map(|(port, _)| *port),
        host_ip: Ipv4Addr::LOCALHOST,
        images,
        agent_exe: PathBuf::from(format!("/proc/{}/exe", std::process::id())),
        ips: Mutex::new(pool),
        pod_capacity: capacity,
        pods_dir,
        pids_dir,
        log_dir: args.log_dir.clone(),
        api_server: server.trim_end_matches('/').to_owned(),
        restart_backoff: Backoff {
            initial: Duration::from_secs(args.restart_backoff_secs.max(1)),
            max: Duration::from_secs(args.restart_backoff_max_secs.max(1)),
        },
        shutdown_grace: Duration::from_secs(args.shutdown_grace_secs),
    });
    run(ctx, args.health_addr, kubelet_tls).await
}

async fn run(
    ctx: Arc<Ctx>,
    health_addr: SocketAddr,
    kubelet_tls: Option<(u16, Arc<rustls::ServerConfig>)>,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = sigterm.recv() => tracing::info!("SIGTERM: stopping pods and exiting"),
                _ = sigint.recv() => tracing::info!("SIGINT: stopping pods and exiting"),
            }
            shutdown.cancel();
        });
    }

    let health = Arc::new(NodeHealth::default());
    let server = tokio::spawn(health::serve(health_addr, health.clone(), shutdown.clone()));
    // Bound before the Node is registered, so its kubelet endpoint answers once it is there.
    let kubelet = match kubelet_tls {
        Some((port, tls)) => {
            let addr = SocketAddr::new(ctx.host_ip.into(), port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the kubelet port {addr}"))?;
            Some(tokio::spawn(streaming::serve(
                listener,
                tls,
                ctx.clone(),
                shutdown.clone(),
            )))
        }
        None => None,
    };

    // The API server may still be starting: retry registration until it works.
    let mut attempt = 0;
    loop {
        match node::register(&ctx).await {
            Ok(()) => break,
            Err(e) => {
                let delay = ctx
                    .restart_backoff
                    .delay(attempt)
                    .min(Duration::from_secs(10));
                attempt += 1;
                tracing::warn!(error = %e, ?delay, "node registration failed; retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
            }
        }
    }
    health.set(true);
    tracing::info!(node = %ctx.node_name, "node Ready");

    let heartbeat = tokio::spawn(node::heartbeat(
        ctx.clone(),
        health.clone(),
        shutdown.clone(),
    ));
    let binder = tokio::spawn(binder::run(
        ctx.clone(),
        node::labels(&ctx.node_name),
        shutdown.clone(),
    ));
    // Runs until shutdown, then stops every pod's processes before returning.
    pods::run(ctx.clone(), shutdown.clone()).await;

    let _ = heartbeat.await;
    let _ = binder.await;
    node::mark_not_ready(&ctx).await;
    if let Some(kubelet) = kubelet {
        let _ = kubelet.await;
    }
    match server.await {
        Ok(Err(e)) => tracing::warn!(error = %e, "health endpoint failed"),
        Err(e) => tracing::warn!(error = %e, "health endpoint task failed"),
        Ok(Ok(())) => {}
    }
    tracing::info!("node agent stopped");
    Ok(())
}
