//! Real TLS handshakes that fail the ways `tls::classify` names, without the stack: a
//! server on loopback presents certificates made on the fly by a throw-away CA: a valid one
//! (the control: the statement runs), an expired one and one for another host name. The
//! names come from what rustls really reports, not from texts typed into a unit test.

mod common;

use std::sync::Arc;

use common::tls_failure;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, date_time_ymd};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracehouse_schema::tls::{TlsConfig, TlsFailure};
use tracehouse_schema::{ConnectionConfig, Error, Server};

struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
}

const CA_NAME: &str = "tracehouse test CA";

fn ca() -> Ca {
    ca_named(CA_NAME)
}

fn ca_named(name: &str) -> Ca {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = params.self_signed(&key).unwrap();
    Ca { key, cert }
}

/// A server certificate for `names`, valid from `valid.0` to `valid.1` (years).
fn leaf(
    ca: &Ca,
    names: &[&str],
    valid: (i32, i32),
) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.not_before = date_time_ymd(valid.0, 1, 1);
    params.not_after = date_time_ymd(valid.1, 1, 1);
    let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (cert.der().clone(), key)
}

/// Serves TLS with `cert` on loopback; each connection that completes the handshake gets an
/// empty `200 OK`. Returns the `https://` URL.
async fn serve(cert: (CertificateDer<'static>, PrivateKeyDer<'static>)) -> String {
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.0], cert.1)
            .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A failed handshake is the point of most cases: nothing to do then.
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let mut buf = [0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    url
}

async fn run(url: &str, ca: &Ca) -> Result<(), Error> {
    let server = Server::new(&ConnectionConfig {
        url: url.to_owned(),
        user: None,
        password: None,
        tls: TlsConfig {
            ca_pem: Some(ca.cert.pem()),
            ..TlsConfig::default()
        },
    })
    .unwrap();
    server.execute("handshake test", "SELECT 1").await
}

#[tokio::test]
async fn expired_and_wrong_host_certificates_are_named() {
    let ca = ca();
    let valid = serve(leaf(&ca, &["127.0.0.1"], (2020, 2100))).await;
    run(&valid, &ca).await.expect("a valid certificate");

    let expired = serve(leaf(&ca, &["127.0.0.1"], (2020, 2021))).await;
    assert_eq!(tls_failure(run(&expired, &ca).await), TlsFailure::Expired);

    let not_yet = serve(leaf(&ca, &["127.0.0.1"], (2090, 2100))).await;
    assert_eq!(tls_failure(run(&not_yet, &ca).await), TlsFailure::Expired);

    let other_host = serve(leaf(&ca, &["clickhouse.example"], (2020, 2100))).await;
    assert_eq!(
        tls_failure(run(&other_host, &ca).await),
        TlsFailure::NameMismatch
    );

    // And a CA that did not sign it.
    assert_eq!(
        tls_failure(run(&valid, &self::ca()).await),
        TlsFailure::UnknownCa
    );
}
