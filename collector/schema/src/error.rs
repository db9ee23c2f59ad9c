//! The errors of this crate, one variant per thing a caller may act on differently.

use std::time::Duration;

/// What went wrong, with enough in the message to fix it without reading code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid {what} name \"{name}\": {reason}")]
    InvalidIdentifier {
        what: &'static str,
        name: String,
        reason: String,
    },

    #[error("invalid options: {0}")]
    InvalidOptions(String),

    /// An applied migration's text no longer matches this binary's text for it.
    #[error(
        "migration {version:04} {name} was applied to {target} with checksum {applied} but \
         now renders to {expected}: applied migrations are never re-run or edited; run with \
         the options it was applied with (attributes, engine, TTL, dedup window) or add a \
         new migration"
    )]
    ChecksumMismatch {
        target: String,
        version: u32,
        name: String,
        applied: String,
        expected: String,
    },

    /// The ledger records a migration this binary does not know (a newer release ran).
    #[error(
        "{target} has migration {version:04} {name} applied, which this binary does not \
         know: it was written by a newer tracehouse; upgrade instead of running this one"
    )]
    UnknownMigration {
        target: String,
        version: u32,
        name: String,
    },

    /// An object exists that the ledger does not know and its shape is not ours.
    #[error(
        "{object} already exists and does not have the expected shape, so it is neither \
         adopted nor altered: {}",
        differences.join("; ")
    )]
    ShapeMismatch {
        object: String,
        differences: Vec<String>,
    },

    #[error(
        "timed out after {waited:?} waiting for the schema lock on {scope}, held by {holder}; \
         if that applier died, its lease expires on its own"
    )]
    LockTimeout {
        scope: String,
        waited: Duration,
        holder: String,
    },

    /// Our lease ran out and someone else took the lock: stop before running more DDL.
    #[error("lost the schema lock on {scope} (lease expired, now held by {holder}); stopped")]
    LockLost { scope: String, holder: String },

    #[cfg(feature = "server")]
    #[error("{context}: {source}")]
    ClickHouse {
        context: String,
        #[source]
        source: clickhouse::error::Error,
    },

    #[cfg(feature = "server")]
    #[error("unexpected answer from ClickHouse: {0}")]
    Protocol(String),

    /// The connection's TLS failed (or TLS and plaintext were mixed up): retrying will not
    /// help until the certificate, the CA or the URL is fixed.
    #[cfg(feature = "server")]
    #[error("{context}: TLS to ClickHouse failed, {}: {detail}", failure.describe())]
    Tls {
        context: String,
        failure: crate::tls::TlsFailure,
        detail: String,
    },
}

#[cfg(feature = "server")]
impl Error {
    pub(crate) fn clickhouse(context: impl Into<String>, source: clickhouse::error::Error) -> Self {
        Self::ClickHouse {
            context: context.into(),
            source,
        }
    }

    /// The ClickHouse error code (`Code: N.`) if this came from the server.
    pub fn server_code(&self) -> Option<u32> {
        match self {
            Self::ClickHouse {
                source: clickhouse::error::Error::BadResponse(body),
                ..
            } => parse_code(body),
            _ => None,
        }
    }
}

/// Reads `N` from a `Code: N. DB::Exception: …` body.
#[cfg(feature = "server")]
fn parse_code(body: &str) -> Option<u32> {
    let rest = &body[body.find("Code: ")? + "Code: ".len()..];
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

#[cfg(all(test, feature = "server"))]
mod tests {
    use super::*;

    #[test]
    fn server_code_is_read_from_the_exception_body() {
        assert_eq!(
            parse_code("Code: 57. DB::Exception: Table x already exists"),
            Some(57)
        );
        assert_eq!(parse_code("garbage"), None);
        let e = Error::clickhouse(
            "create",
            clickhouse::error::Error::BadResponse("Code: 60. DB::Exception: nope".into()),
        );
        assert_eq!(e.server_code(), Some(60));
    }
}
