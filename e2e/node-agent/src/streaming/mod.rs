//! The kubelet's HTTPS server, streaming part: what the API server calls for
//! `kubectl port-forward` (`POST /portForward/{namespace}/{pod}[/{uid}]`, GET too, as the
//! kubelet routes both), plus `/healthz`.
//!
//! As on a real node, the API server reaches it at the Node's `InternalIP` and
//! `status.daemonEndpoints.kubeletEndpoint.port`, checks its serving certificate against the
//! cluster CA (`--kubelet-certificate-authority`) and presents its kubelet client certificate
//! (`--kubelet-client-certificate`), which this server requires to chain to `--client-ca-file`.
//! A port-forward request is an HTTP/1.1 upgrade to `SPDY/3.1` with the subprotocol
//! `portforward.k8s.io`; the upgraded connection is served by [`portforward`].

pub mod portforward;

use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::header::{CONNECTION, HeaderValue, UPGRADE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::ctx::Ctx;

const PROTOCOL_HEADER: &str = "x-stream-protocol-version";
const ACCEPTED_PROTOCOLS_HEADER: &str = "x-accepted-stream-protocol-versions";
const SPDY: &str = "SPDY/3.1";

/// The serving certificate and key, and the CA client certificates must chain to.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// TLS 1.2/1.3 with `ring`, client certificates required, HTTP/1.1 only (upgrades).
pub fn tls_config(files: &TlsFiles) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading {}", files.cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .with_context(|| format!("reading {}", files.key.display()))?;
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&files.client_ca)
        .with_context(|| format!("reading {}", files.client_ca.display()))?
    {
        roots.add(ca?)?;
    }
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves on `listener` until `shutdown`; upgraded connections live on until their client
/// ends them.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "kubelet server listening (HTTPS: port-forward)");
    }
    loop {
        let (tcp, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let acceptor = acceptor.clone();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let tls =
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "kubelet server: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "kubelet server: TLS handshake timed out");
                        return;
                    }
                };
            let service = service_fn(move |req| route(req, ctx.clone()));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades()
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet server: connection ended");
            }
        });
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<String> {
    let mut r = Response::new(body.into());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

async fn route(req: Request<Incoming>, ctx: Arc<Ctx>) -> Result<Response<String>, Infallible> {
    let path = req.uri().path().to_owned();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let get_or_post = matches!(*req.method(), Method::GET | Method::POST);
    Ok(match parts.as_slice() {
        ["healthz"] if req.method() == Method::GET => text(StatusCode::OK, "ok"),
        ["portForward", ns, name] if get_or_post => port_forward(req, &ctx, ns, name, None).await,
        ["portForward", ns, name, uid] if get_or_post => {
            port_forward(req, &ctx, ns, name, Some(uid)).await
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    })
}

/// The comma-separated elements of every `name` header, trimmed, empty ones left out.
fn tokens(
    headers: &hyper::HeaderMap,
    name: impl hyper::header::AsHeaderName,
) -> impl Iterator<Item = &str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Whether `headers` hold `name` with an element equal to `want` (case-insensitive).
fn has_token(
    headers: &hyper::HeaderMap,
    name: impl hyper::header::AsHeaderName,
    want: &str,
) -> bool {
    tokens(headers, name).any(|t| t.eq_ignore_ascii_case(want))
}

async fn port_forward(
    mut req: Request<Incoming>,
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: Option<&str>,
) -> Response<String> {
    let h = req.headers();
    if !has_token(h, CONNECTION, "upgrade") || !has_token(h, UPGRADE, SPDY) {
        return text(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        );
    }
    let offered: Vec<&str> = tokens(h, PROTOCOL_HEADER).collect();
    if offered.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            format!("unable to upgrade: header {PROTOCOL_HEADER} does not exist in request"),
        );
    }
    if !offered.contains(&portforward::PROTOCOL) {
        let mut r = text(
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts [{}]",
                portforward::PROTOCOL
            ),
        );
        r.headers_mut().insert(
            ACCEPTED_PROTOCOLS_HEADER,
            HeaderValue::from_static(portforward::PROTOCOL),
        );
        return r;
    }
    let target = match target(ctx, ns, name, uid).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => portforward::serve(TokioIo::new(upgraded), target).await,
            Err(e) => tracing::warn!(error = %e, "port-forward: upgrade failed"),
        }
    });
    let mut r = text(StatusCode::SWITCHING_PROTOCOLS, "");
    let headers = r.headers_mut();
    headers.remove(hyper::header::CONTENT_TYPE);
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static(SPDY));
    headers.insert(
        PROTOCOL_HEADER,
        HeaderValue::from_static(portforward::PROTOCOL),
    );
    r
}

/// The pod, if this node runs it: its IP comes from the agent's own pool (what it bound the
/// pod's processes to), not from the API.
async fn target(
    ctx: &Ctx,
    ns: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<portforward::Target, Response<String>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let pod = match pods.get_opt(name).await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(text(StatusCode::NOT_FOUND, "pod does not exist")),
        Err(e) => {
            return Err(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("looking up pod {ns}/{name}: {e}"),
            ));
        }
    };
    let on_this_node =
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&ctx.node_name);
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    if !on_this_node {
        return Err(text(StatusCode::NOT_FOUND, "pod does not exist"));
    }
    if uid.is_some_and(|u| u != pod_uid) {
        return Err(text(StatusCode::NOT_FOUND, "pod not found"));
    }
    let ip = ctx
        .ips
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .address_of(&pod_uid);
    let Some(ip) = ip else {
        return Err(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("pod {ns}/{name} has no IP on this node (not started yet)"),
        ));
    };
    Ok(portforward::Target {
        pod: format!("{name}_{ns}"),
        uid: pod_uid,
        ip: IpAddr::V4(ip),
    })
}
