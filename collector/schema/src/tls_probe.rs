//! Does a port speak TLS? The proof behind calling a failed `http://` URL a plaintext client
//! on a TLS port: a TLS server resets a plaintext request, and so does a crashing server, so
//! [`crate::tls::classify`] alone cannot tell them apart for `http://` URLs. Sending a real
//! ClientHello (built by rustls, never completed) and looking at the first record of the answer
//! can: a TLS server answers with a handshake or an alert record, anything else does not.

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// TLS record content types a server may answer a ClientHello with.
const HANDSHAKE: u8 = 0x16;
const ALERT: u8 = 0x15;

/// `host:port` of an `http://` URL (port 80 when none is given); `None` for other schemes.
pub fn http_authority(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    if host_port.is_empty() {
        return None;
    }
    let has_port = match host_port.rfind(']') {
        Some(end) => host_port[end..].contains(':'),
        None => host_port.contains(':'),
    };
    Some(if has_port {
        host_port.to_owned()
    } else {
        format!("{host_port}:80")
    })
}

/// Pure: whether the first bytes a server sent answer a ClientHello as TLS does: a handshake
/// or alert record of TLS 1.x (`0x16|0x15, 0x03, 0x00..=0x04`).
pub fn is_tls_record(first: &[u8]) -> bool {
    matches!(first, [HANDSHAKE | ALERT, 0x03, minor, ..] if *minor <= 0x04)
}

/// Sends a ClientHello to `authority` and reports whether the answer is a TLS record; false
/// when nothing (or not TLS) comes back within `timeout`.
pub async fn answers_tls(authority: &str, timeout: Duration) -> bool {
    tokio::time::timeout(timeout, probe(authority))
        .await
        .ok()
        .flatten()
        .is_some_and(|first| is_tls_record(&first))
}

async fn probe(authority: &str) -> Option<Vec<u8>> {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_matches(['[', ']']);
    let name = ServerName::try_from(host.to_owned()).ok()?;
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
    let mut tls = ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    while tls.wants_write() {
        tls.write_tls(&mut hello).ok()?;
    }
    let mut stream = TcpStream::connect(authority).await.ok()?;
    stream.write_all(&hello).await.ok()?;
    let mut first = [0u8; 3];
    stream.read_exact(&mut first).await.ok()?;
    Some(first.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_of_http_urls() {
        assert_eq!(
            http_authority("http://127.0.0.1:18443").as_deref(),
            Some("127.0.0.1:18443")
        );
        assert_eq!(
            http_authority("http://u:p@ch.svc/?database=x").as_deref(),
            Some("ch.svc:80")
        );
        assert_eq!(
            http_authority("http://[::1]:8123/").as_deref(),
            Some("[::1]:8123")
        );
        assert_eq!(http_authority("http://[::1]/").as_deref(), Some("[::1]:80"));
        assert_eq!(http_authority("https://ch:8443"), None);
    }

    #[test]
    fn tls_records_are_told_from_http_answers() {
        assert!(is_tls_record(&[0x16, 0x03, 0x03]));
        assert!(is_tls_record(&[0x15, 0x03, 0x01, 0x00, 0x02]));
        assert!(!is_tls_record(b"HTTP/1.1 400"));
        assert!(!is_tls_record(&[0x16, 0x02]));
        assert!(!is_tls_record(&[]));
    }

    /// A plaintext HTTP server is not taken for a TLS one.
    #[tokio::test]
    async fn an_http_server_does_not_answer_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await;
        });
        assert!(!answers_tls(&addr, Duration::from_secs(5)).await);
    }
}
