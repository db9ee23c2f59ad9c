//! ClickHouse sink: one insert over HTTP, its outcome classified, nothing else.
//!
//! The body arrives already encoded and, by default, ClickHouse-LZ4-compressed (sent with
//! `decompress=1`; `clickhouse.compression: none` sends it as encoded); the sink adds the
//! deduplication token that makes a retried or replayed batch a no-op, the credentials, and
//! turns every failure into an [`InsertError`] carrying ClickHouse's exception code when
//! there is one. Retrying is the caller's business ([`crate::retry`]).

use std::time::Duration;

use bytes::Bytes;

use crate::config::{Compression, Credentials};
use crate::retry::{Verdict, classify_exception};

/// A failed insert attempt.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// ClickHouse answered with an exception.
    #[error("ClickHouse error {code}: {message}")]
    Server { code: u32, message: String },
    /// No usable answer: connection refused or reset, timeout, HTTP error without a code.
    #[error("ClickHouse unreachable: {0}")]
    Transport(String),
}

impl InsertError {
    pub fn verdict(&self) -> Verdict {
        match self {
            InsertError::Server { code, message } => classify_exception(*code, message),
            InsertError::Transport(_) => Verdict::Retry,
        }
    }

    /// A low-cardinality label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            // TLS failures are not outages: the certificate or the URL needs fixing.
            InsertError::Transport(t) if tracehouse_schema::tls::classify(t, true).is_some() => {
                "tls"
            }
            InsertError::Transport(_) => "unreachable",
            InsertError::Server { code, message } => match classify_exception(*code, message) {
                Verdict::Retry => "server_busy",
                Verdict::Permanent => "rejected_data",
                Verdict::Fatal => "config_or_access",
            },
        }
    }
}

/// Where and how to insert.
#[derive(Clone)]
pub struct Sink {
    client: reqwest::Client,
    base_url: String,
    credentials: Credentials,
    /// How the bodies handed to [`Sink::insert`] are compressed (the encoder's setting).
    compression: Compression,
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sink")
            .field("base_url", &self.base_url)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// Install the process-wide TLS crypto provider (ring) that `https://` endpoints need.
/// Idempotent; the first provider installed wins.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Sink {
    pub fn new(
        base_url: &str,
        credentials: Credentials,
        tls: &tracehouse_schema::TlsConfig,
        timeout: Duration,
    ) -> Result<Self, InsertError> {
        install_crypto_provider();
        // The same rustls configuration as every other ClickHouse client (schema, verify).
        let tls = tls
            .client_config()
            .map_err(|e| InsertError::Transport(format!("ClickHouse TLS: {e}")))?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .timeout(timeout)
            .connect_timeout(Duration::from_secs(5))
            .pool_idle_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| InsertError::Transport(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            client,
            base_url: base_url.trim_end_matches('/').to_string(),
            credentials,
            compression: Compression::Lz4,
        })
    }

    /// Bodies compressed as `compression` says (LZ4 unless told otherwise).
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Whether the endpoint is `https://`.
    pub fn is_https(&self) -> bool {
        self.base_url.starts_with("https://")
    }

    /// `GET /ping`: is the server there?
    pub async fn ping(&self) -> Result<(), InsertError> {
        let resp = self
            .client
            .get(format!("{}/ping", self.base_url))
            .send()
            .await
            .map_err(|e| InsertError::Transport(describe_reqwest(&e)))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(InsertError::Transport(format!(
                "/ping answered {}",
                resp.status()
            )))
        }
    }

    /// Send one insert body, compressed as [`Sink::with_compression`] said. `query` is the
    /// `INSERT INTO … FORMAT …` statement; `token` the deduplication token (same batch ⇒
    /// same token).
    pub async fn insert(&self, query: &str, token: &str, body: Bytes) -> Result<(), InsertError> {
        let decompress = match self.compression {
            Compression::Lz4 => "1",
            Compression::None => "0",
        };
        let resp = self
            .client
            .post(format!("{}/", self.base_url))
            .query(&[
                ("query", query),
                ("decompress", decompress),
                ("insert_deduplicate", "1"),
                ("insert_deduplication_token", token),
                // Synchronous inserts: a 200 means the rows are durable in the table.
                ("async_insert", "0"),
            ])
            .header("X-ClickHouse-User", &self.credentials.user)
            .header("X-ClickHouse-Key", &self.credentials.password)
            .header("Content-Type", "application/octet-stream")
            .body(body)
            .send()
            .await
            .map_err(|e| InsertError::Transport(describe_reqwest(&e)))?;
        let status = resp.status();
        let code_header = resp
            .headers()
            .get("X-ClickHouse-Exception-Code")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        let text = resp
            .text()
            .await
            .map_err(|e| InsertError::Transport(describe_reqwest(&e)))?;
        // ClickHouse may report an exception in a 200 body when it has already started
        // answering; trust the code, not the status.
        let code = code_header.or_else(|| parse_exception_code(&text));
        match code {
            Some(code) => Err(InsertError::Server {
                code,
                message: first_line(&text),
            }),
            None if status.is_success() => Ok(()),
            None => Err(InsertError::Transport(format!(
                "HTTP {status}: {}",
                first_line(&text)
            ))),
        }
    }
}

/// The error and its causes, without the URL (it carries the whole INSERT statement).
fn describe_reqwest(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// `Code: 241. DB::Exception: …` → 241.
pub fn parse_exception_code(body: &str) -> Option<u32> {
    let rest = body.trim_start().strip_prefix("Code: ")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    line.chars().take(500).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exception_codes_are_read_from_bodies() {
        assert_eq!(
            parse_exception_code("Code: 241. DB::Exception: Memory limit"),
            Some(241)
        );
        assert_eq!(
            parse_exception_code("  Code: 27. DB::Exception: x"),
            Some(27)
        );
        assert_eq!(parse_exception_code("Ok."), None);
        assert_eq!(parse_exception_code(""), None);
    }

    #[test]
    fn tls_failures_have_their_own_reason() {
        let e = InsertError::Transport(
            "cannot connect: invalid peer certificate: UnknownIssuer".into(),
        );
        assert_eq!(e.reason(), "tls");
        assert_eq!(e.verdict(), Verdict::Retry);
        assert!(crate::metrics::INSERT_FAILURE_REASONS.contains(&e.reason()));
    }

    #[test]
    fn errors_map_to_verdicts_and_reasons() {
        let e = InsertError::Server {
            code: 252,
            message: String::new(),
        };
        assert_eq!((e.verdict(), e.reason()), (Verdict::Retry, "server_busy"));
        let e = InsertError::Server {
            code: 27,
            message: String::new(),
        };
        assert_eq!(
            (e.verdict(), e.reason()),
            (Verdict::Permanent, "rejected_data")
        );
        let e = InsertError::Transport("refused".into());
        assert_eq!((e.verdict(), e.reason()), (Verdict::Retry, "unreachable"));
    }
}
