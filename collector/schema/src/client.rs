//! The connection to ClickHouse over HTTP: where it is, who we are, and the two calls
//! the rest of the crate makes (run a statement, fetch rows).
//!
//! Every statement goes through `query_raw`, which sends the text verbatim: the
//! `clickhouse` crate's `query` would treat a `?` inside a quoted identifier as a bind
//! placeholder, and quoting is already done by `ident`.

use std::fmt;

use clickhouse::{Client, Compression, RowOwned, RowRead};

use crate::error::Error;
use crate::tls::TlsConfig;

/// Environment variable with the server URL, e.g. `http://127.0.0.1:8123`.
pub const ENV_URL: &str = "CLICKHOUSE_URL";
/// Environment variable with the user name (the server's `default` if unset).
pub const ENV_USER: &str = "CLICKHOUSE_USER";
/// Environment variable with the password (none if unset). Never logged or printed.
pub const ENV_PASSWORD: &str = "CLICKHOUSE_PASSWORD";

/// Where the server is and how to log in.
#[derive(Clone, Default)]
pub struct ConnectionConfig {
    pub url: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// TLS for `https://` URLs (CA bundle, client certificate).
    pub tls: TlsConfig,
}

impl ConnectionConfig {
    /// Reads [`ENV_URL`], [`ENV_USER`], [`ENV_PASSWORD`] and the TLS variables of
    /// [`crate::tls`]; the URL is required.
    pub fn from_env() -> Result<Self, Error> {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let url = var(ENV_URL).ok_or_else(|| {
            Error::InvalidOptions(format!(
                "{ENV_URL} is not set; point it at the ClickHouse HTTP interface (e.g. http://127.0.0.1:8123)"
            ))
        })?;
        Ok(Self {
            url,
            user: var(ENV_USER),
            password: var(ENV_PASSWORD),
            tls: TlsConfig::from_env().map_err(|e| Error::InvalidOptions(e.to_string()))?,
        })
    }
}

/// Shows everything but the password.
impl fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// How long the TLS probe of an `http://` URL may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// A handle on one ClickHouse server (or cluster entry point). Cheap to clone.
#[derive(Clone)]
pub struct Server {
    client: Client,
    https: bool,
    /// `host:port` of an `http://` URL, to probe for TLS when its connection is reset.
    http_authority: Option<String>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server").finish_non_exhaustive()
    }
}

impl Server {
    /// A client for `config`; fails only on an unusable TLS setup (unreadable PEM).
    pub fn new(config: &ConnectionConfig) -> Result<Self, Error> {
        let mut client = config
            .tls
            .clickhouse_client()
            .map_err(|e| Error::InvalidOptions(format!("ClickHouse TLS: {e}")))?
            .with_url(&config.url)
            // Schema traffic is a few small statements; compression buys nothing.
            .with_compression(Compression::None);
        if let Some(user) = &config.user {
            client = client.with_user(user);
        }
        if let Some(password) = &config.password {
            client = client.with_password(password);
        }
        Ok(Self {
            client,
            https: config.url.starts_with("https://"),
            http_authority: crate::tls_probe::http_authority(&config.url),
        })
    }

    /// Wraps a client the caller configured (TLS, headers, …). Its default database
    /// does not matter: every statement here names its database.
    pub fn from_client(client: Client) -> Self {
        Self {
            client,
            https: false,
            http_authority: None,
        }
    }

    /// A failed call as an [`Error`]: TLS failures of `https://` URLs named
    /// ([`Error::Tls`]), the rest as ClickHouse errors. An `http://` URL whose connection is
    /// reset is called a plaintext client on a TLS port only when the port answers a TLS
    /// ClientHello ([`crate::tls_probe`]): a failing server looks the same otherwise.
    async fn error(&self, context: &str, e: clickhouse::error::Error) -> Error {
        if let clickhouse::error::Error::Network(_) = &e {
            let detail = crate::tls::error_chain(&e);
            match crate::tls::classify(&detail, self.https) {
                Some(failure) if self.https => {
                    return Error::Tls {
                        context: context.to_owned(),
                        failure,
                        detail,
                    };
                }
                Some(failure @ crate::tls::TlsFailure::ProtocolMismatch) => {
                    if let Some(authority) = &self.http_authority
                        && crate::tls_probe::answers_tls(authority, PROBE_TIMEOUT).await
                    {
                        return Error::Tls {
                            context: context.to_owned(),
                            failure,
                            detail: format!(
                                "{detail} ({authority} answers TLS: the URL should be https://)"
                            ),
                        };
                    }
                }
                _ => {}
            }
        }
        Error::clickhouse(context, e)
    }

    /// Runs one statement that returns no rows.
    pub async fn execute(&self, context: &str, sql: &str) -> Result<(), Error> {
        tracing::debug!(context, "clickhouse statement");
        match self.client.query_raw(sql).execute().await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.error(context, e).await),
        }
    }

    /// Runs a `SELECT` and returns every row.
    pub async fn fetch_all<T>(&self, context: &str, sql: &str) -> Result<Vec<T>, Error>
    where
        T: RowOwned + RowRead,
    {
        match self.client.query_raw(sql).fetch_all::<T>().await {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.error(context, e).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_contains_the_password() {
        let c = ConnectionConfig {
            url: "http://h:8123".into(),
            user: Some("u".into()),
            password: Some("s3cret".into()),
            tls: TlsConfig::default(),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}
