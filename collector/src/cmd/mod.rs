//! Subcommands of the collector binary, one module each, and the ClickHouse TLS flags they
//! share.

use std::path::PathBuf;

pub mod run;
pub mod schema;
pub mod serve_health;

/// TLS to ClickHouse on the command line (`run` and `schema`); each flag also reads the
/// environment variable `tracehouse_schema::tls` names.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClickHouseTlsArgs {
    /// PEM CA bundle trusted for an https:// ClickHouse URL (default: the system roots).
    #[arg(long = "clickhouse-ca-file", env = "CLICKHOUSE_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mutual TLS to ClickHouse (needs --clickhouse-client-key).
    #[arg(long = "clickhouse-client-cert", env = "CLICKHOUSE_CLIENT_CERT")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[arg(long = "clickhouse-client-key", env = "CLICKHOUSE_CLIENT_KEY")]
    pub client_key: Option<PathBuf>,
    /// Accept any ClickHouse server certificate. Only for tests.
    #[arg(long = "clickhouse-insecure-skip-verify")]
    pub insecure_skip_verify: bool,
}

impl ClickHouseTlsArgs {
    /// Flags override the file's `clickhouse.tls`.
    pub fn apply(&self, tls: &mut tracehouse_collector::config::ClickHouseTlsConfig) {
        if let Some(v) = &self.ca_file {
            tls.ca_file = Some(v.clone());
        }
        if let Some(v) = &self.client_cert {
            tls.client_cert_file = Some(v.clone());
        }
        if let Some(v) = &self.client_key {
            tls.client_key_file = Some(v.clone());
        }
        if self.insecure_skip_verify {
            tls.insecure_skip_verify = true;
        }
    }

    /// The TLS configuration these flags describe (files read now).
    pub fn config(&self) -> Result<tracehouse_schema::TlsConfig, tracehouse_schema::TlsError> {
        tracehouse_schema::TlsConfig::from_files(
            self.ca_file.as_deref(),
            self.client_cert.as_deref(),
            self.client_key.as_deref(),
            self.insecure_skip_verify,
        )
    }
}
