//! ClickHouse sink: one insert over HTTP, its outcome classified, nothing else.
//!
//! The body arrives already encoded and, by default, ClickHouse-LZ4-compressed, carrying how
//! it was compressed ([`Body`]: the sink sends `decompress=1` exactly then). The sink adds the
//! deduplication token that makes a retried or replayed batch a no-op, the credentials, and
//! turns every failure into an [`InsertError`] carrying ClickHouse's exception code when
//! there is one. Retrying is the caller's business ([`crate::insert::retry`]).

use std::time::Duration;

use crate::config::{Compression, Credentials};
use crate::insert::retry::{Verdict, classify_exception, classify_http_status};
use crate::workers::Body;

/// A failed insert attempt.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// ClickHouse answered with an exception.
    #[error("ClickHouse error {code}: {message}")]
    Server { code: u32, message: String },
    /// No usable answer: connection refused or reset, timeout, a broken body.
    #[error("ClickHouse unreachable: {0}")]
    Transport(String),
    /// An HTTP error status without a ClickHouse exception code: a proxy, an ingress or a
    /// load balancer in front of ClickHouse answered (ClickHouse itself always sends its code).
    #[error(
        "HTTP {status} without a ClickHouse code (a proxy or ingress in front of ClickHouse?): {message}"
    )]
    Http { status: u16, message: String },
}

impl InsertError {
    pub fn verdict(&self) -> Verdict {
        match self {
            InsertError::Server { code, message } => classify_exception(*code, message),
            InsertError::Transport(_) => Verdict::Retry,
            InsertError::Http { status, .. } => classify_http_status(*status),
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
            InsertError::Http { status: 413, .. } => "body_too_large",
            InsertError::Http { .. } => match self.verdict() {
                Verdict::Fatal => "config_or_access",
                _ => "unreachable",
            },
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
    /// `insert_quorum` for replicated tables (`None`: the server's, i.e. no quorum).
    insert_quorum: Option<String>,
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
            insert_quorum: None,
        })
    }

    /// Send `insert_quorum` with every insert (replicated tables: a 200 then means that many
    /// replicas have the rows; `auto` is a majority).
    pub fn with_insert_quorum(mut self, quorum: Option<String>) -> Self {
        self.insert_quorum = quorum;
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

    /// `SELECT version()`: the server's release (`26.9.2.1`), which decides the insert format
    /// of a JSON table ([`crate::insert::format`]).
    pub async fn server_version(&self) -> Result<String, InsertError> {
        let resp = self
            .client
            .get(format!("{}/", self.base_url))
            .query(&[("query", "SELECT version()")])
            .header("X-ClickHouse-User", &self.credentials.user)
            .header("X-ClickHouse-Key", &self.credentials.password)
            .send()
            .await
            .map_err(|e| InsertError::Transport(describe_reqwest(&e)))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| InsertError::Transport(describe_reqwest(&e)))?;
        match parse_exception_code(&text) {
            Some(code) => Err(InsertError::Server {
                code,
                message: first_line(&text),
            }),
            None if status.is_success() => Ok(text.trim().to_string()),
            None => Err(InsertError::Http {
                status: status.as_u16(),
                message: first_line(&text),
            }),
        }
    }

    /// Send one insert body, with `decompress=1` when the encoder compressed it (the body
    /// says). `query` is the `INSERT INTO … FORMAT …` statement; `token` the deduplication
    /// token (same batch ⇒ same token).
    pub async fn insert(&self, query: &str, token: &str, body: Body) -> Result<(), InsertError> {
        let decompress = match body.compression {
            Compression::Lz4 => "1",
            Compression::None => "0",
        };
        let mut request = self
            .client
            .post(format!("{}/", self.base_url))
            .query(&insert_params(query, decompress, token));
        if let Some(q) = &self.insert_quorum {
            request = request.query(&[("insert_quorum", q.as_str())]);
        }
        let resp = request
            .header("X-ClickHouse-User", &self.credentials.user)
            .header("X-ClickHouse-Key", &self.credentials.password)
            .header("Content-Type", "application/octet-stream")
            .body(body.bytes)
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
            None => Err(InsertError::Http {
                status: status.as_u16(),
                message: first_line(&text),
            }),
        }
    }
}

/// The query parameters of every insert.
fn insert_params<'a>(
    query: &'a str,
    decompress: &'a str,
    token: &'a str,
) -> [(&'a str, &'a str); 6] {
    [
        ("query", query),
        ("decompress", decompress),
        ("insert_deduplicate", "1"),
        ("insert_deduplication_token", token),
        // A block the table drops as a duplicate is not written into the table's
        // materialized views either (the default only since 26.2; 24.7 to 26.1, and any
        // server pinned to an older `compatibility`, wrote it into every view: a span
        // counted twice in a user's RED-metrics view). Every server since 19.x knows it.
        ("deduplicate_blocks_in_dependent_materialized_views", "1"),
        // Synchronous inserts: a 200 means the rows are in the table.
        ("async_insert", "0"),
    ]
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

    #[test]
    fn http_errors_without_a_code_split_pass_or_alert() {
        let http = |status| InsertError::Http {
            status,
            message: "<html>".into(),
        };
        assert_eq!(
            (http(413).verdict(), http(413).reason()),
            (Verdict::Permanent, "body_too_large"),
            "413 splits the insert"
        );
        for status in [408, 429, 502, 503, 504] {
            assert_eq!(
                (http(status).verdict(), http(status).reason()),
                (Verdict::Retry, "unreachable")
            );
        }
        for status in [400, 401, 403, 404, 414, 431] {
            assert_eq!(
                (http(status).verdict(), http(status).reason()),
                (Verdict::Fatal, "config_or_access"),
                "{status}"
            );
        }
        for status in [413, 400, 502] {
            assert!(crate::metrics::INSERT_FAILURE_REASONS.contains(&http(status).reason()));
        }
    }

    #[test]
    fn every_insert_is_deduplicated_in_the_table_and_its_views() {
        let p = insert_params("INSERT", "1", "t-0-1-2");
        assert!(p.contains(&("insert_deduplicate", "1")));
        assert!(p.contains(&("insert_deduplication_token", "t-0-1-2")));
        assert!(p.contains(&("deduplicate_blocks_in_dependent_materialized_views", "1")));
    }
}
