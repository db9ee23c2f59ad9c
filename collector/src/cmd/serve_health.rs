//! `tracehouse-collector serve-health`: a minimal process that only answers health probes.
//!
//! It proves the pod plumbing (probes, pod IPs, restarts, graceful stop) without Kafka or
//! ClickHouse: `GET /healthz` and `GET /readyz` answer 200 `ok`, SIGTERM or SIGINT ends it
//! with exit code 0, and `--exit-after-secs N --exit-code C` makes it exit on its own with C.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, clap::Args)]
pub struct ServeHealthArgs {
    /// Listen address. Default: `$POD_IP:<port>`, or `0.0.0.0:<port>` without `POD_IP`.
    #[arg(long)]
    addr: Option<SocketAddr>,
    /// The pod IP to listen on when `--addr` is not given.
    #[arg(long, env = "POD_IP")]
    pod_ip: Option<IpAddr>,
    /// Port used with the pod IP when `--addr` is not given.
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Exit on its own after this many seconds (for restart tests).
    #[arg(long)]
    exit_after_secs: Option<u64>,
    /// Exit code used with `--exit-after-secs`.
    #[arg(long, default_value_t = 1, requires = "exit_after_secs")]
    exit_code: u8,
}

/// Why the server stopped.
enum Stop {
    Signal(&'static str),
    Timer,
}

pub fn run(args: ServeHealthArgs) -> ExitCode {
    let addr = args.addr.unwrap_or_else(|| {
        SocketAddr::new(
            args.pod_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            args.port,
        )
    });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("serve-health: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(addr, args.exit_after_secs.map(Duration::from_secs))) {
        Ok(Stop::Signal(name)) => {
            eprintln!("serve-health: {name} received, exiting");
            ExitCode::SUCCESS
        }
        Ok(Stop::Timer) => {
            eprintln!(
                "serve-health: --exit-after-secs elapsed, exiting with {}",
                args.exit_code
            );
            ExitCode::from(args.exit_code)
        }
        Err(e) => {
            eprintln!("serve-health: {addr}: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(addr: SocketAddr, exit_after: Option<Duration>) -> std::io::Result<Stop> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!(
        "serve-health: listening on http://{}",
        listener.local_addr()?
    );
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });
    let timer = async {
        match exit_after {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let stop = tokio::select! {
        _ = sigterm.recv() => Stop::Signal("SIGTERM"),
        _ = sigint.recv() => Stop::Signal("SIGINT"),
        () = timer => Stop::Timer,
    };
    let _ = stop_tx.send(());
    // In-flight requests finish; a hanging client does not hold the exit for long.
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(e)) => return Err(std::io::Error::other(e)),
        Err(_) => {}
    }
    Ok(stop)
}
