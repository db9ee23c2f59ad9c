//! Every TLS outcome of a ClickHouse connection, on the stack's secured fronts (the HTTPS
//! port and the mutual-TLS port of `e2e/stack`): the stack's CA and client certificate work;
//! an unknown CA, no client certificate and an `http://` URL pointed at the TLS port come back
//! as [`Error::Tls`] naming which, and a closed port is not called a TLS problem.
#![cfg(feature = "stack-tests")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::tls_failure;
use tracehouse_schema::tls::{TlsConfig, TlsFailure};
use tracehouse_schema::tls_probe::{answers_tls, http_authority};
use tracehouse_schema::{ConnectionConfig, Error, Server};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `e2e/stack up` and `eval \"$(e2e/stack env)\"` first")
    })
}

fn file(name: &str) -> PathBuf {
    PathBuf::from(var(name))
}

fn server(url: &str, tls: TlsConfig) -> Server {
    Server::new(&ConnectionConfig {
        url: url.to_owned(),
        user: Some(var("CLICKHOUSE_USER")),
        password: Some(var("CLICKHOUSE_PASSWORD")),
        tls,
    })
    .unwrap()
}

async fn ping(server: &Server) -> Result<(), Error> {
    server.execute("tls test", "SELECT 1").await
}

fn stack_ca() -> TlsConfig {
    TlsConfig::from_files(Some(&file("TRACEHOUSE_CA_FILE")), None, None, false).unwrap()
}

#[tokio::test]
async fn each_tls_outcome_is_named() {
    let https = var("CLICKHOUSE_TLS_URL");
    let mtls = var("CLICKHOUSE_MTLS_URL");

    ping(&server(&https, stack_ca()))
        .await
        .expect("HTTPS with the stack's CA");
    let with_cert = TlsConfig::from_files(
        Some(&file("TRACEHOUSE_CA_FILE")),
        Some(&file("TRACEHOUSE_CLIENT_CERT")),
        Some(&file("TRACEHOUSE_CLIENT_KEY")),
        false,
    )
    .unwrap();
    ping(&server(&mtls, with_cert)).await.expect("mutual TLS");

    let other_ca =
        TlsConfig::from_files(Some(&file("TRACEHOUSE_OTHER_CA_FILE")), None, None, false).unwrap();
    assert_eq!(
        tls_failure(ping(&server(&https, other_ca)).await),
        TlsFailure::UnknownCa
    );
    assert_eq!(
        tls_failure(ping(&server(&mtls, stack_ca())).await),
        TlsFailure::ClientCertRejected
    );

    // A plaintext client on the TLS port: the probe proves the port speaks TLS.
    let plain_on_tls = https.replacen("https://", "http://", 1);
    let r = ping(&server(&plain_on_tls, TlsConfig::default())).await;
    let message = r.as_ref().map_err(ToString::to_string).unwrap_err();
    assert_eq!(tls_failure(r), TlsFailure::ProtocolMismatch);
    assert!(message.contains("should be https://"), "{message}");

    // The probe on its own: the TLS port answers TLS, the plaintext port does not.
    let tls_port = http_authority(&plain_on_tls).unwrap();
    let plain_port = http_authority(&var("CLICKHOUSE_URL")).unwrap();
    assert!(answers_tls(&tls_port, Duration::from_secs(5)).await);
    assert!(!answers_tls(&plain_port, Duration::from_secs(5)).await);

    // Nothing listening: not a TLS problem.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let r = ping(&server(&url, TlsConfig::default())).await;
    assert!(
        matches!(r, Err(Error::ClickHouse { .. })),
        "a closed port: {r:?}"
    );
}
