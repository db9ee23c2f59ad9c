//! Schema migrations of a pipeline's traces table, through the schema crate: read where the
//! table stands and apply what is pending, before any collector is rolled out.
//!
//! The read (`status`) happens at every reconcile and writes nothing; `apply` (which takes
//! the schema lock in ClickHouse and records each step) runs only when something is pending.

use std::time::Duration;

use tracehouse_schema::migrate::State;
use tracehouse_schema::{ApplyOptions, ConnectionConfig, LockConfig, Server, Status, TableOptions};

/// Where the schema stands after this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaOutcome {
    /// Highest migration version recorded for the table.
    pub version: u32,
    /// `NNNN name` of each migration recorded by this call (empty when already up to date).
    pub applied: Vec<String>,
}

/// The highest version recorded in the ledger for this table (0 when none).
fn recorded_version(status: &Status) -> u32 {
    status
        .migrations
        .iter()
        .filter(|m| matches!(m.state, State::Applied(_)))
        .map(|m| m.migration.version)
        .max()
        .unwrap_or(0)
}

/// Brings the traces table up to date. `applied_by` is recorded in the ledger.
pub async fn ensure(
    connection: &ConnectionConfig,
    options: &TableOptions,
    applied_by: &str,
    lock_timeout: Duration,
) -> Result<SchemaOutcome, tracehouse_schema::Error> {
    let server = Server::new(connection)?;
    let status = tracehouse_schema::status(&server, options).await?;
    if status.is_up_to_date() {
        return Ok(SchemaOutcome {
            version: recorded_version(&status),
            applied: Vec::new(),
        });
    }
    // Refuse conflicts before taking the lock; `apply` checks again under it.
    status.check()?;
    let report = tracehouse_schema::apply(
        &server,
        options,
        &ApplyOptions {
            lock: LockConfig {
                timeout: lock_timeout,
                ..LockConfig::default()
            },
            up_to: None,
            applied_by: applied_by.to_owned(),
        },
    )
    .await?;
    Ok(SchemaOutcome {
        version: recorded_version(&report.status),
        applied: report
            .applied
            .iter()
            .map(|a| format!("{:04} {}", a.version, a.name))
            .collect(),
    })
}
