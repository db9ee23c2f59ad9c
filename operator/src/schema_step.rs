//! The reconcile's schema step: the schema migrations of a pipeline's traces table, through
//! the schema crate — read where the table stands and apply what is pending, before any
//! collector is rolled out.
//!
//! The read (`status`) happens at every reconcile and writes nothing; `apply` (which takes
//! the schema lock in ClickHouse and records each step) runs only when something is pending.
//!
//! The reconciler puts a deadline on this step. `apply` runs in a task of its own, so that
//! deadline only stops the *waiting*: the statements under the lock run to their end and
//! the lock is released when they are done, never abandoned mid-way with the lock held
//! (issue 30, finding 7). Within `apply`, only the wait for the lock is timed out.

use std::time::Duration;

use tracehouse_schema::dedup_window::{PipelineShape, effective_window};
use tracehouse_schema::{Action, State};
use tracehouse_schema::{
    ApplyOptions, ConnectionConfig, Layout, LockConfig, Server, Status, TableOptions,
};

/// Where the schema stands after this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaOutcome {
    /// Highest migration version recorded for the table.
    pub version: u32,
    /// `NNNN name` of each migration recorded by this call (empty when already up to date).
    pub applied: Vec<String>,
    /// The traces table's insert-deduplication window now; `None` for a `Null` table.
    pub dedup_window: Option<u64>,
    /// Verify-only: what `apply` would do and nobody has done yet (empty: up to date).
    pub missing: Vec<String>,
    /// The traces table's TTL expression now (`None`: keeps everything).
    pub retention: Option<String>,
    /// The opt-in layouts the table has (recorded as run in its ledger).
    pub layouts: Vec<Layout>,
    /// Of those, the ones the spec no longer asks for: kept, never dropped.
    pub kept_layouts: Vec<Layout>,
}

/// What a verify-only check finds missing: the pending migrations (`NNNN name`) and a window
/// smaller than asked. An opt-in layout the spec does not ask for is not missing: recording
/// it `skipped` runs nothing (so a table migrated by an older release stays Ready under
/// `Verify` until its owner's next `schema apply` records it).
fn missing(status: &Status) -> Vec<String> {
    let mut out: Vec<String> = status
        .pending()
        .filter(|(m, a)| !(m.opt_in.is_some() && **a == Action::NoOp))
        .map(|(m, _)| format!("{:04} {}", m.version, m.name))
        .collect();
    out.extend(status.ttl_changes.iter().cloned());
    if let Some(w) = status.window.as_ref().filter(|w| !w.changes.is_empty()) {
        out.push(format!(
            "{} {} (now {})",
            w.setting,
            w.desired,
            w.current
                .map_or_else(|| "none".to_owned(), |c| c.to_string())
        ));
    }
    out
}

/// The deduplication window a pipeline keeps on its table: `requested`
/// (`spec.clickhouse.schema.dedupWindow`) is a floor, raised to what `partitions` at
/// `linger_ms` need ([`PipelineShape::required_window`], whose header has the
/// arithmetic); 0 asks for no deduplication (honoured when the table is created; an
/// existing table's window is only ever raised). A floor rather than a replacement because the
/// API server stored the old default (1000) in every existing `TracePipeline`: a new
/// field or a changed default would not reach them, a floor does.
pub fn dedup_window(requested: u64, partitions: i32, linger_ms: i64) -> u64 {
    let shape = PipelineShape::new(
        u64::try_from(partitions).unwrap_or(0),
        Duration::from_millis(u64::try_from(linger_ms).unwrap_or(0)),
    );
    effective_window(requested, shape.required_window())
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

/// Brings the traces table up to date (`verify_only`: only reads where it stands, and lists
/// what is missing). `applied_by` is recorded in the ledger.
pub async fn ensure(
    connection: &ConnectionConfig,
    options: &TableOptions,
    applied_by: &str,
    lock_timeout: Duration,
    verify_only: bool,
) -> Result<SchemaOutcome, tracehouse_schema::Error> {
    let server = Server::new(connection)?;
    let status = tracehouse_schema::status(&server, options).await?;
    if status.is_up_to_date() || verify_only {
        // A conflict (edited migration, newer release) is named the same in both modes.
        status.check()?;
        return Ok(SchemaOutcome {
            version: recorded_version(&status),
            applied: Vec::new(),
            dedup_window: status.window.as_ref().and_then(|w| w.current),
            missing: missing(&status),
            retention: status.ttl.clone(),
            layouts: status.applied_layouts(),
            kept_layouts: status.kept_layouts.clone(),
        });
    }
    // Refuse conflicts before taking the lock; `apply` checks again under it.
    status.check()?;
    let apply_options = ApplyOptions {
        lock: LockConfig {
            timeout: lock_timeout,
            ..LockConfig::default()
        },
        up_to: None,
        applied_by: applied_by.to_owned(),
    };
    let options = options.clone();
    let target = format!("{}.{}", options.database, options.table);
    let task = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let report = tracehouse_schema::apply(&server, &options, &apply_options).await;
        // Logged here too: when the caller's deadline passed, nobody else sees the end.
        match &report {
            Ok(r) => {
                tracing::debug!(%target, applied = r.applied.len(), took = ?started.elapsed(), "schema apply finished")
            }
            Err(e) => {
                tracing::warn!(%target, error = %e, took = ?started.elapsed(), "schema apply failed")
            }
        }
        report
    });
    let report = match task.await {
        Ok(report) => report?,
        Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
        // Only at runtime shutdown; the lock's own rules end its claim.
        Err(_) => {
            return Err(tracehouse_schema::Error::Protocol(
                "the schema apply task was cancelled (shutting down)".into(),
            ));
        }
    };
    Ok(SchemaOutcome {
        missing: Vec::new(),
        retention: report.status.ttl.clone(),
        layouts: report.status.applied_layouts(),
        kept_layouts: report.status.kept_layouts.clone(),
        version: recorded_version(&report.status),
        dedup_window: report.status.window.as_ref().and_then(|w| w.current),
        applied: report
            .applied
            .iter()
            .map(|a| format!("{:04} {}", a.version, a.name))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::dedup_window;

    #[test]
    fn the_window_follows_the_partitions_with_the_spec_as_a_floor() {
        // Issue 30's duplicates: 128 partitions at the stored default of 1000.
        assert_eq!(dedup_window(1_000, 128, 1_000), 46_080);
        assert_eq!(
            dedup_window(1_000, 2, 1_000),
            1_000,
            "small pipelines keep the floor"
        );
        assert_eq!(dedup_window(100_000, 128, 1_000), 100_000);
        assert_eq!(
            dedup_window(0, 128, 1_000),
            0,
            "0 asks for no deduplication"
        );
        assert_eq!(
            dedup_window(1_000, 8, 100),
            28_800,
            "a shorter linger, more blocks"
        );
    }
}
