//! OAUTHBEARER with OIDC client credentials, for every Kafka client of both binaries: the
//! collector's `kafka.oauth` settings ([`OAuthConfig`], files as the operator mounts them),
//! the values they stand for ([`OAuthClient`], which the operator also builds from a pipeline's
//! Secret), and with the feature `oauth` the token source itself:
//!
//! - [`token`]: the client-credentials request (RFC 6749 §4.4: `POST grant_type=client_credentials`
//!   with HTTP basic authentication, as librdkafka's own OIDC method sends it) to the token
//!   endpoint over rustls, and [`TokenSource`], the one cache of a process's (a pipeline's)
//!   token, so every client of it costs one request per refresh;
//! - [`librdkafka`]: [`WithToken`], a librdkafka client with a thread that hands it each token
//!   (with the SASL extensions) before the old one runs out, and the refusal, named, when there
//!   is none.
//!
//! Why not librdkafka's `sasl.oauthbearer.method=oidc`: the workspace builds librdkafka without
//! libcurl, which that method needs. Why not rdkafka's `ClientContext::generate_oauth_token`:
//! its `OAuthToken` carries no SASL extensions (rdkafka 0.39 sets every token with none, and
//! Confluent Cloud needs `logicalCluster` and `identityPoolId`); it runs only inside a client's
//! `poll`, which the metadata and watermark readers never call, and it blocks that poll for the
//! HTTP request; and a client with rdkafka's default context (the dead-letter producer, the
//! admin client) cannot have it. librdkafka's `rd_kafka_oauthbearer_set_token` takes the token
//! from any thread; [`librdkafka`] is the one place that calls it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[cfg(feature = "oauth")]
pub mod librdkafka;
#[cfg(all(test, feature = "oauth"))]
mod tests;
#[cfg(feature = "oauth")]
pub mod token;

#[cfg(feature = "oauth")]
pub use librdkafka::WithToken;
#[cfg(feature = "oauth")]
pub use token::{Token, TokenSource};

/// `kafka.oauth`: OIDC client credentials for the OAUTHBEARER mechanism
/// (`kafka.properties` must say `sasl.mechanism: OAUTHBEARER`). Secrets are files, as the
/// operator mounts them from the pipeline's Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The token endpoint, `https://…` (the client-credentials grant is posted there).
    pub token_endpoint: String,
    /// File holding the client id.
    pub client_id_file: PathBuf,
    /// File holding the client secret. Never logged.
    pub client_secret_file: PathBuf,
    /// `scope` of the token request (none: the provider's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// SASL extensions sent with the token (RFC 7628; Confluent Cloud: `logicalCluster`,
    /// `identityPoolId`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, String>,
    /// PEM CA bundle trusted for the token endpoint beside the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

/// What a token request needs, as values: read from [`OAuthConfig`]'s files by the collector,
/// from the pipeline's Secret by the operator. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret: String,
    pub scope: Option<String>,
    pub extensions: BTreeMap<String, String>,
    /// PEM CA bundle trusted for the token endpoint beside the system roots.
    pub ca_pem: Option<String>,
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scope", &self.scope)
            .field("extensions", &self.extensions)
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .finish()
    }
}

/// The `sasl.mechanism` value that takes a token.
pub const MECHANISM: &str = "OAUTHBEARER";

/// A `kafka.oauth` setting that cannot be used, naming the field (or the file).
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    #[error("invalid `{field}`: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> SettingError {
    SettingError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Pure: `kafka.oauth` against the `kafka.properties` it goes with.
pub(crate) fn validate(
    o: &OAuthConfig,
    properties: &BTreeMap<String, String>,
) -> Result<(), SettingError> {
    validate_endpoint(&o.token_endpoint).map_err(|r| invalid("kafka.oauth.token_endpoint", r))?;
    validate_extensions(&o.extensions).map_err(|r| invalid("kafka.oauth.extensions", r))?;
    if o.scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
        return Err(invalid(
            "kafka.oauth.scope",
            "must not be empty (leave it out for the provider's default)",
        ));
    }
    match properties.get("sasl.mechanism") {
        Some(m) if m.eq_ignore_ascii_case(MECHANISM) => {}
        other => {
            return Err(invalid(
                "kafka.oauth",
                format!(
                    "takes `sasl.mechanism: {MECHANISM}` in kafka.properties, found {}",
                    other.map_or("none".to_owned(), |m| format!("{m:?}"))
                ),
            ));
        }
    }
    for key in [
        "sasl.oauthbearer.method",
        "enable.sasl.oauthbearer.unsecure.jwt",
    ] {
        if properties.contains_key(key) {
            return Err(invalid(
                "kafka.properties",
                format!("`{key}` and kafka.oauth are two token sources: set one"),
            ));
        }
    }
    Ok(())
}

/// `https://` or `http://` with a host.
pub fn validate_endpoint(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("{url:?} must start with https:// (or http://)"))?;
    if rest.is_empty() || rest.starts_with('/') || url.chars().any(char::is_whitespace) {
        return Err(format!("{url:?} names no host"));
    }
    Ok(())
}

/// RFC 7628 §3.1, as librdkafka checks it: keys are letters and not `auth`, values printable
/// ASCII, space, tab, CR or LF.
pub fn validate_extensions(extensions: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in extensions {
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphabetic()) {
            return Err(format!("key {k:?}: letters only (RFC 7628)"));
        }
        if k == "auth" {
            return Err("`auth` is reserved for the token itself".to_owned());
        }
        if let Some(c) = v
            .chars()
            .find(|c| !(c.is_ascii_graphic() || matches!(c, ' ' | '\t' | '\r' | '\n')))
        {
            return Err(format!(
                "value of {k:?} holds {c:?}: printable ASCII only (RFC 7628)"
            ));
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, SettingError> {
    std::fs::read_to_string(path).map_err(|source| SettingError::Read {
        path: path.to_owned(),
        source,
    })
}

impl OAuthConfig {
    /// The values the files hold (a trailing newline is not part of an id or a secret).
    pub fn client(&self) -> Result<OAuthClient, SettingError> {
        let trimmed = |path: &Path| -> Result<String, SettingError> {
            let v = read(path)?.trim_end_matches(['\n', '\r']).to_owned();
            if v.is_empty() {
                return Err(SettingError::Read {
                    path: path.to_owned(),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidData, "empty"),
                });
            }
            Ok(v)
        };
        Ok(OAuthClient {
            token_endpoint: self.token_endpoint.clone(),
            client_id: trimmed(&self.client_id_file)?,
            client_secret: trimmed(&self.client_secret_file)?,
            scope: self.scope.clone(),
            extensions: self.extensions.clone(),
            ca_pem: self.ca_file.as_deref().map(read).transpose()?,
        })
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    fn oauth() -> OAuthConfig {
        OAuthConfig {
            token_endpoint: "https://idp.example.com/oauth2/token".into(),
            client_id_file: "/etc/tracehouse/kafka-oauth/client-id".into(),
            client_secret_file: "/etc/tracehouse/kafka-oauth/client-secret".into(),
            scope: None,
            extensions: BTreeMap::new(),
            ca_file: None,
        }
    }

    fn field(r: Result<(), SettingError>) -> &'static str {
        match r {
            Err(SettingError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn oauth_needs_the_oauthbearer_mechanism_and_no_other_token_source() {
        let mut p = BTreeMap::from([("sasl.mechanism".to_owned(), "OAUTHBEARER".to_owned())]);
        validate(&oauth(), &p).unwrap();
        p.insert("sasl.mechanism".into(), "SCRAM-SHA-512".into());
        assert_eq!(field(validate(&oauth(), &p)), "kafka.oauth");
        assert_eq!(field(validate(&oauth(), &BTreeMap::new())), "kafka.oauth");
        p.insert("sasl.mechanism".into(), "OAUTHBEARER".into());
        p.insert("sasl.oauthbearer.method".into(), "oidc".into());
        assert_eq!(field(validate(&oauth(), &p)), "kafka.properties");
    }

    #[test]
    fn endpoints_and_extensions_are_checked_as_librdkafka_would() {
        let p = BTreeMap::from([("sasl.mechanism".to_owned(), "OAUTHBEARER".to_owned())]);
        for bad in [
            "idp.example.com/token",
            "ftp://idp/token",
            "https://",
            "https:///x",
        ] {
            let mut o = oauth();
            o.token_endpoint = bad.into();
            assert_eq!(
                field(validate(&o, &p)),
                "kafka.oauth.token_endpoint",
                "{bad}"
            );
        }
        let mut o = oauth();
        o.extensions = BTreeMap::from([
            ("logicalCluster".to_owned(), "lkc-12345".to_owned()),
            ("identityPoolId".to_owned(), "pool-AbCd".to_owned()),
        ]);
        validate(&o, &p).unwrap();
        for (k, v) in [("logical_cluster", "x"), ("auth", "x"), ("a", "caf\u{e9}")] {
            let mut o = oauth();
            o.extensions = BTreeMap::from([(k.to_owned(), v.to_owned())]);
            assert_eq!(field(validate(&o, &p)), "kafka.oauth.extensions", "{k}");
        }
        let mut o = oauth();
        o.scope = Some(" ".into());
        assert_eq!(field(validate(&o, &p)), "kafka.oauth.scope");
    }

    #[test]
    fn the_files_are_read_without_their_trailing_newline_and_the_secret_is_never_shown() {
        let dir = std::env::temp_dir().join(format!("th-oauth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut o = oauth();
        o.client_id_file = dir.join("client-id");
        o.client_secret_file = dir.join("client-secret");
        std::fs::write(&o.client_id_file, "tracehouse\n").unwrap();
        std::fs::write(&o.client_secret_file, "s3cr3t\r\n").unwrap();
        let c = o.client().unwrap();
        assert_eq!(
            (c.client_id.as_str(), c.client_secret.as_str()),
            ("tracehouse", "s3cr3t")
        );
        assert!(!format!("{c:?}").contains("s3cr3t"));
        std::fs::write(&o.client_secret_file, "\n").unwrap();
        let e = o.client().unwrap_err();
        assert!(e.to_string().contains("client-secret"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
