//! TLS to ClickHouse, one definition for every client path: the schema's `Server`
//! (migrations, lock, ledger), the collector's inserts and health checks, the `schema` CLI
//! and `loadgen verify` all build their `rustls::ClientConfig` here, so a CA bundle, a client
//! certificate (mutual TLS) or the test-only insecure switch means the same thing everywhere.
//!
//! The inputs are PEM text, not paths: the operator has the Secrets' values in memory, the
//! collector and the command lines read files ([`TlsConfig::from_files`]). rustls with the
//! ring provider, so images need no OpenSSL; without a CA the system roots are trusted.
//!
//! [`classify`] names what went wrong on a failed connection (unknown CA, expired or
//! mismatched certificate, rejected client certificate, a plaintext/TLS mix-up) from the
//! error chain, for conditions and metrics.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Environment variable with a PEM CA bundle file for `https://` ClickHouse URLs.
pub const ENV_CA_FILE: &str = "CLICKHOUSE_CA_FILE";
/// Environment variable with a PEM client certificate file (mutual TLS).
pub const ENV_CLIENT_CERT: &str = "CLICKHOUSE_CLIENT_CERT";
/// Environment variable with the PEM private key of that certificate.
pub const ENV_CLIENT_KEY: &str = "CLICKHOUSE_CLIENT_KEY";
/// `true`: skip verifying the server's certificate. Only for tests.
pub const ENV_INSECURE: &str = "CLICKHOUSE_TLS_INSECURE_SKIP_VERIFY";

/// A TLS setup that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} holds no PEM {expected}")]
    NoPem {
        what: &'static str,
        expected: &'static str,
    },
    #[error("{what}: {reason}")]
    Invalid { what: &'static str, reason: String },
}

/// A client certificate and its key, PEM. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub cert_pem: String,
    pub key_pem: String,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &format_args!("<{} bytes>", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// How to talk TLS to ClickHouse. The default trusts the system roots, presents no client
/// certificate and verifies the server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM CA bundle trusted instead of the system roots.
    pub ca_pem: Option<String>,
    /// Client certificate for mutual TLS.
    pub client: Option<ClientIdentity>,
    /// Accept any server certificate. Only for tests.
    pub insecure_skip_verify: bool,
}

fn read(what: &'static str, path: &Path) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

impl TlsConfig {
    /// Reads the PEM files named (a certificate needs its key and the other way round).
    pub fn from_files(
        ca: Option<&Path>,
        client_cert: Option<&Path>,
        client_key: Option<&Path>,
        insecure_skip_verify: bool,
    ) -> Result<Self, TlsError> {
        let client = match (client_cert, client_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(ClientIdentity {
                cert_pem: read("client certificate", cert)?,
                key_pem: read("client key", key)?,
            }),
            _ => {
                return Err(TlsError::Invalid {
                    what: "client certificate",
                    reason: "a client certificate and its key go together: set both or neither"
                        .into(),
                });
            }
        };
        Ok(Self {
            ca_pem: ca.map(|p| read("CA bundle", p)).transpose()?,
            client,
            insecure_skip_verify,
        })
    }

    /// Reads [`ENV_CA_FILE`], [`ENV_CLIENT_CERT`], [`ENV_CLIENT_KEY`] and [`ENV_INSECURE`].
    pub fn from_env() -> Result<Self, TlsError> {
        let var = |name| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let insecure = std::env::var(ENV_INSECURE).is_ok_and(|v| v == "true" || v == "1");
        Self::from_files(
            var(ENV_CA_FILE).as_deref(),
            var(ENV_CLIENT_CERT).as_deref(),
            var(ENV_CLIENT_KEY).as_deref(),
            insecure,
        )
    }

    /// The rustls configuration: the roots (the CA bundle or the system's) and the client
    /// certificate.
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid {
                what: "TLS versions",
                reason: e.to_string(),
            })?;
        let builder = if self.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAnyServer(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some(id) => {
                let chain = certs("client certificate", &id.cert_pem)?;
                let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).map_err(|_| {
                    TlsError::NoPem {
                        what: "client key",
                        expected: "private key",
                    }
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsError::Invalid {
                        what: "client certificate",
                        reason: e.to_string(),
                    })?
            }
        };
        // No ALPN here: the HTTP clients (hyper-rustls, reqwest) announce what they speak.
        Ok(config)
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        match &self.ca_pem {
            Some(pem) => {
                for cert in certs("CA bundle", pem)? {
                    roots.add(cert).map_err(|e| TlsError::Invalid {
                        what: "CA bundle",
                        reason: e.to_string(),
                    })?;
                }
            }
            None => {
                // Unreadable system certificates are skipped, as every TLS client does.
                let native = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(native.certs);
            }
        }
        Ok(roots)
    }

    /// A `clickhouse::Client` whose connections use this configuration (plain `http://`
    /// URLs still work through it).
    pub fn clickhouse_client(&self) -> Result<clickhouse::Client, TlsError> {
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_keepalive(Some(std::time::Duration::from_secs(60)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.client_config()?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                // ClickHouse closes idle connections after 3 s; leave before it does.
                .pool_idle_timeout(std::time::Duration::from_secs(2))
                .build(https);
        Ok(clickhouse::Client::with_http_client(client))
    }
}

fn certs(what: &'static str, pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Invalid {
            what,
            reason: format!("unreadable PEM: {e:?}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoPem {
            what,
            expected: "certificate",
        });
    }
    Ok(certs)
}

/// The test-only verifier behind `insecure_skip_verify`: any certificate, but signatures
/// are still checked so the handshake itself is real.
#[derive(Debug)]
struct AcceptAnyServer(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What a failed connection to ClickHouse says about TLS, read from its error text (the
/// chain of sources joined, as rustls, hyper and reqwest word it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The server's certificate does not chain to a trusted CA.
    UnknownCa,
    /// The server's certificate expired or is not yet valid.
    Expired,
    /// The server's certificate is not for this host name.
    NameMismatch,
    /// The server refused our client certificate, or wanted one we did not send.
    ClientCertRejected,
    /// An `https://` client met a plaintext server (or the other way round).
    ProtocolMismatch,
    /// Any other TLS failure.
    Other,
}

impl TlsFailure {
    /// A short explanation for conditions and logs.
    pub fn describe(self) -> &'static str {
        match self {
            Self::UnknownCa => "the server's certificate is signed by an unknown CA",
            Self::Expired => "the server's certificate has expired or is not yet valid",
            Self::NameMismatch => "the server's certificate is not valid for this host name",
            Self::ClientCertRejected => {
                "the server rejected the client certificate (or requires one)"
            }
            Self::ProtocolMismatch => "TLS and plaintext mixed up: check http:// vs https://",
            Self::Other => "the TLS handshake failed",
        }
    }
}

/// Pure: the TLS failure named by an error text, if it is one. `https` says whether the
/// client spoke TLS (a plaintext client on a TLS port only sees the connection close).
pub fn classify(error_text: &str, https: bool) -> Option<TlsFailure> {
    let t = error_text.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| t.contains(n));
    // BadSignature: an issuer of that name is trusted but did not sign it (a regenerated CA).
    if has(&[
        "unknownissuer",
        "unknown issuer",
        "unknown ca",
        "unknownca",
        "badsignature",
    ]) {
        return Some(TlsFailure::UnknownCa);
    }
    if has(&["expired", "notvalidyet", "not valid yet"]) {
        return Some(TlsFailure::Expired);
    }
    if has(&[
        "notvalidforname",
        "not valid for name",
        "certificate is not valid for",
    ]) {
        return Some(TlsFailure::NameMismatch);
    }
    if has(&[
        "certificaterequired",
        "certificate required",
        "badcertificate",
        "bad certificate",
        "certificateunknown",
        "handshakefailure",
    ]) {
        return Some(TlsFailure::ClientCertRejected);
    }
    if https
        && has(&[
            "invalidcontenttype",
            "corrupt message",
            "wrong version number",
        ])
    {
        return Some(TlsFailure::ProtocolMismatch);
    }
    if !https
        && has(&[
            "connection closed before message completed",
            "incompletemessage",
            "connection reset",
        ])
    {
        // Not proof (a crashing server looks the same), hence the wording of `describe`.
        return Some(TlsFailure::ProtocolMismatch);
    }
    if has(&["tls", "certificate", "handshake"]) && https {
        return Some(TlsFailure::Other);
    }
    None
}

/// The error and its sources, joined by `: ` (what [`classify`] reads).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_named_from_the_error_text() {
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                true,
                Some(TlsFailure::UnknownCa),
            ),
            (
                "invalid peer certificate: BadSignature",
                true,
                Some(TlsFailure::UnknownCa),
            ),
            (
                "invalid peer certificate: Expired",
                true,
                Some(TlsFailure::Expired),
            ),
            (
                "invalid peer certificate: NotValidForName",
                true,
                Some(TlsFailure::NameMismatch),
            ),
            (
                "received fatal alert: CertificateRequired",
                true,
                Some(TlsFailure::ClientCertRejected),
            ),
            (
                "received corrupt message of type InvalidContentType",
                true,
                Some(TlsFailure::ProtocolMismatch),
            ),
            (
                "network error: connection closed before message completed",
                false,
                Some(TlsFailure::ProtocolMismatch),
            ),
            ("tcp connect error: Connection refused", true, None),
            ("tcp connect error: Connection refused", false, None),
        ];
        for (text, https, want) in cases {
            assert_eq!(classify(text, https), want, "{text}");
        }
    }

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let dir = std::env::temp_dir();
        let err = TlsConfig::from_files(None, Some(&dir), None, false).unwrap_err();
        assert!(err.to_string().contains("set both"), "{err}");
    }

    #[test]
    fn garbage_pem_is_named_and_the_key_never_shown() {
        let tls = TlsConfig {
            ca_pem: Some("not a certificate".into()),
            client: Some(ClientIdentity {
                cert_pem: String::new(),
                key_pem: "SECRET-KEY-MATERIAL".into(),
            }),
            insecure_skip_verify: false,
        };
        let err = tls.client_config().unwrap_err().to_string();
        assert!(err.contains("CA bundle"), "{err}");
        assert!(!format!("{tls:?}").contains("SECRET-KEY-MATERIAL"));
    }

    #[test]
    fn defaults_build_with_the_system_roots() {
        TlsConfig::default().client_config().unwrap();
        TlsConfig {
            insecure_skip_verify: true,
            ..TlsConfig::default()
        }
        .client_config()
        .unwrap();
    }
}
