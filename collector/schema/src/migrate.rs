//! The async API the CLI and the operator call: [`status`], [`plan`] and [`apply`].
//!
//! `status` and `plan` only read (they never create the database or the ledger).
//! `apply` creates the bookkeeping tables if needed, takes the schema lock, reads the
//! ledger again under it, and then runs or adopts each pending migration in order,
//! recording each one right after it succeeds.
//!
//! After the migrations, `apply` raises the deduplication window to
//! [`TableOptions::dedup_window`] (`ALTER TABLE … MODIFY SETTING`, only on the tables
//! whose window is smaller — never lowered, see [`crate::dedup_window`] — so it is
//! idempotent), recorded in the ledger as a setting
//! change ([`ledger::SETTINGS_VERSION`]). The window is desired state, not history:
//! migration 5 recorded with another window still counts as applied (its recorded text
//! equals ours but for the number), so changing the window never reads as an edited
//! migration.

use std::time::Instant;

use crate::adopt::{self, Verdict};
use crate::client::Server;
use crate::create_query;
use crate::ddl;
use crate::dedup_window;
use crate::error::Error;
use crate::ident::{Ident, quote_str};
use crate::layouts::{self, Layout, OptInState};
use crate::ledger::{self, AppliedRecord, Mode, RecordContext};
use crate::lock::{self, LockConfig, SchemaLock};
use crate::migrations::{self, Rendered};
use crate::model::TableOptions;
use crate::retention;

/// What will happen to a pending migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Run its statements.
    Run,
    /// Its object exists with our shape: record it without running anything.
    Adopt { notes: Vec<String> },
    /// Its object exists with another shape: `apply` refuses.
    Conflict { differences: Vec<String> },
    /// Nothing to run for these options; recorded so versions stay contiguous.
    NoOp,
}

/// Where one migration stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Applied(AppliedRecord),
    /// Recorded with another checksum: its text changed since it was applied.
    ChecksumMismatch(AppliedRecord),
    Pending(Action),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    pub migration: Rendered,
    pub state: State,
}

/// Every migration of one traces table and where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub migrations: Vec<MigrationStatus>,
    /// Ledger rows for versions this binary does not know (a newer release).
    pub unknown: Vec<AppliedRecord>,
    /// The deduplication window; `None` for an engine without one (`Null`).
    pub window: Option<WindowStatus>,
    /// Retention: what `apply` runs to bring the tables' TTL to the options' (`MODIFY TTL`
    /// or `REMOVE TTL`); empty when it is as asked ([`crate::retention`]).
    pub ttl_changes: Vec<String>,
    /// The traces table's TTL expression now (`None`: keeps everything, or no table yet).
    pub ttl: Option<String>,
    /// Opt-in layouts applied to the table that the options no longer ask for: kept, never
    /// dropped ([`crate::layouts`]).
    pub kept_layouts: Vec<Layout>,
    target: String,
}

/// Where the deduplication window stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowStatus {
    /// The engine's setting (`non_replicated_deduplication_window`, …).
    pub setting: &'static str,
    /// What the options ask for.
    pub desired: u64,
    /// The traces table's window now (its setting or the engine default); `None` while
    /// the table does not exist.
    pub current: Option<u64>,
    /// What `apply` runs to raise every table to `desired`; empty when none is smaller.
    pub changes: Vec<String>,
}

impl Status {
    /// The migrations still to run or adopt, in order.
    pub fn pending(&self) -> impl Iterator<Item = (&Rendered, &Action)> {
        self.migrations.iter().filter_map(|m| match &m.state {
            State::Pending(a) => Some((&m.migration, a)),
            _ => None,
        })
    }

    /// True when every known migration is recorded, the window is as asked, and
    /// nothing is amiss.
    pub fn is_up_to_date(&self) -> bool {
        self.pending().next().is_none()
            && self.window.as_ref().is_none_or(|w| w.changes.is_empty())
            && self.ttl_changes.is_empty()
            && self.check().is_ok()
    }

    /// The first reason `apply` would refuse to run, if any.
    pub fn check(&self) -> Result<(), Error> {
        if let Some(u) = self.unknown.first() {
            return Err(Error::UnknownMigration {
                target: self.target.clone(),
                version: u.version,
                name: u.name.clone(),
            });
        }
        for m in &self.migrations {
            match &m.state {
                State::ChecksumMismatch(rec) => {
                    return Err(Error::ChecksumMismatch {
                        target: self.target.clone(),
                        version: m.migration.version,
                        name: m.migration.name.to_string(),
                        applied: rec.checksum.clone(),
                        expected: m.migration.checksum.clone(),
                    });
                }
                State::Pending(Action::Conflict { differences }) => {
                    let object = m
                        .migration
                        .creates
                        .as_ref()
                        .map_or_else(|| self.target.clone(), |c| c.name().to_string());
                    return Err(Error::ShapeMismatch {
                        object,
                        differences: differences.clone(),
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Where every migration of `opts.table` stands. Read-only.
pub async fn status(server: &Server, opts: &TableOptions) -> Result<Status, Error> {
    let rendered = migrations::render_all(opts)?;
    let records = ledger::read(server, opts).await?;
    let mut out = Vec::with_capacity(rendered.len());
    for m in rendered {
        let record = records.iter().find(|r| r.version == m.version);
        let opt_in = m.opt_in.map(|o| layouts::opt_in_state(o, record));
        let state = match (opt_in, record) {
            (Some(OptInState::Recorded), Some(r)) => State::Applied(r.clone()),
            (Some(OptInState::Run), _) => State::Pending(Action::Run),
            // Recorded `skipped` by `apply` (see `apply_locked`).
            (Some(OptInState::Skip), _) => State::Pending(Action::NoOp),
            (_, Some(r)) if r.checksum == m.checksum || same_but_window(r, &m) => {
                State::Applied(r.clone())
            }
            (_, Some(r)) => State::ChecksumMismatch(r.clone()),
            (_, None) => State::Pending(pending_action(server, opts, &m).await?),
        };
        out.push(MigrationStatus {
            migration: m,
            state,
        });
    }
    let known = migrations::MIGRATIONS.len() as u32;
    let (ttl, ttl_changes) = ttl_status(server, opts, traces_table_adopted(&records)).await?;
    Ok(Status {
        migrations: out,
        kept_layouts: layouts::kept(opts, &records),
        unknown: records.into_iter().filter(|r| r.version > known).collect(),
        window: window_status(server, opts).await?,
        ttl_changes,
        ttl,
        target: format!("{}.{}", opts.database, opts.table),
    })
}

/// Whether the ledger records the traces table (migration 1) as adopted from another writer.
fn traces_table_adopted(records: &[AppliedRecord]) -> bool {
    records
        .iter()
        .any(|r| r.version == 1 && r.mode == Mode::Adopted.as_str())
}

/// The traces table's TTL now, and the statements that bring every table's to the options'
/// (none while an `adopted` table keeps its own, see [`retention::keeps_own_ttl`]).
/// Read-only.
pub async fn ttl_status(
    server: &Server,
    opts: &TableOptions,
    adopted: bool,
) -> Result<(Option<String>, Vec<String>), Error> {
    let tables = retention::tables(opts)?;
    let names: Vec<Ident> = tables.iter().map(|(n, _)| n.clone()).collect();
    let existing = create_queries(server, &opts.database, &names).await?;
    let current = existing
        .iter()
        .find(|(n, _)| n == &opts.table)
        .and_then(|(_, q)| retention::current_ttl(q));
    let changes = if retention::keeps_own_ttl(opts, adopted) {
        Vec::new()
    } else {
        retention::change_statements(opts, &tables, &existing)
    };
    Ok((current, changes))
}

/// A recorded migration whose text differs from ours only in a window number.
/// Or only in its TTL clause (retention is desired state too, see [`crate::retention`]).
/// Only an intact ledger row qualifies: its checksum must still be that of its own statements,
/// so a tampered checksum is refused even when the statements match.
fn same_but_window(recorded: &AppliedRecord, m: &Rendered) -> bool {
    let normal = |s: &str| retention::without_ttl(&dedup_window::without_window_values(s));
    let intact =
        migrations::checksum(std::slice::from_ref(&recorded.statements)) == recorded.checksum;
    intact
        && !m.statements.is_empty()
        && normal(&recorded.statements) == normal(&m.statements.join(";\n"))
}

#[derive(Debug, clickhouse::Row, serde::Deserialize)]
struct CreateRow {
    name: String,
    create_table_query: String,
}

/// `(name, create_table_query)` of those of `names` that exist in the database, their
/// comments taken out ([`create_query::without_comments`]): what the TTL and window
/// parsers read.
pub(crate) async fn create_queries(
    server: &Server,
    database: &Ident,
    names: &[Ident],
) -> Result<Vec<(Ident, String)>, Error> {
    let list = names
        .iter()
        .map(|n| quote_str(n.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    let rows: Vec<CreateRow> = server
        .fetch_all(
            "read the table settings",
            &format!(
                "SELECT name, create_table_query FROM system.tables \
                 WHERE database = {} AND name IN ({list})",
                quote_str(database.as_str())
            ),
        )
        .await?;
    Ok(names
        .iter()
        .filter_map(|n| {
            rows.iter().find(|r| r.name == n.as_str()).map(|r| {
                (
                    n.clone(),
                    create_query::without_comments(&r.create_table_query),
                )
            })
        })
        .collect())
}

/// The server's defaults of the window settings (`system.merge_tree_settings`); empty when
/// they cannot be read (then every window setting is set explicitly, never assumed).
pub(crate) async fn server_defaults(server: &Server) -> dedup_window::ServerDefaults {
    #[derive(Debug, clickhouse::Row, serde::Deserialize)]
    struct Row {
        name: String,
        value: String,
    }
    let names = dedup_window::WINDOW_SETTINGS
        .iter()
        .map(|n| quote_str(n))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("SELECT name, value FROM system.merge_tree_settings WHERE name IN ({names})");
    match server
        .fetch_all::<Row>("read the server's window defaults", &sql)
        .await
    {
        Ok(rows) => dedup_window::ServerDefaults::from_rows(
            rows.iter().map(|r| (r.name.as_str(), r.value.as_str())),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read system.merge_tree_settings; setting every window setting explicitly");
            dedup_window::ServerDefaults::default()
        }
    }
}

/// Where the window of the traces table and its lookup table stands: the settings of the
/// engine the server reports (Cloud's `SharedMergeTree` for a `MergeTree`), their values
/// or the server's defaults. Read-only.
pub async fn window_status(
    server: &Server,
    opts: &TableOptions,
) -> Result<Option<WindowStatus>, Error> {
    if dedup_window::desired_setting(opts).is_none() {
        return Ok(None);
    }
    let tables = create_queries(
        server,
        &opts.database,
        &[opts.table.clone(), opts.lookup_table()?],
    )
    .await?;
    let traces = tables
        .iter()
        .find(|(n, _)| n == &opts.table)
        .map(|(_, q)| q);
    let engine = traces.and_then(|q| dedup_window::engine_in(q));
    let seconds =
        dedup_window::PipelineShape::new(1, std::time::Duration::from_secs(1)).required_seconds();
    let desired = dedup_window::desired_settings(opts, engine, seconds);
    let Some(count) = desired.first() else {
        return Ok(None);
    };
    let defaults = server_defaults(server).await;
    let current = traces.and_then(|q| dedup_window::current_value(count.name, q, &defaults));
    Ok(Some(WindowStatus {
        setting: count.name,
        desired: count.value,
        current,
        changes: dedup_window::change_statements(opts, &desired, &tables, &defaults),
    }))
}

async fn pending_action(
    server: &Server,
    opts: &TableOptions,
    m: &Rendered,
) -> Result<Action, Error> {
    if m.statements.is_empty() {
        return Ok(Action::NoOp);
    }
    let Some(creates) = &m.creates else {
        return Ok(Action::Run);
    };
    Ok(match adopt::inspect(server, opts, creates).await? {
        None => Action::Run,
        Some(Verdict::Adopt { notes }) => Action::Adopt { notes },
        Some(Verdict::Conflict { differences }) => Action::Conflict { differences },
    })
}

/// What `apply` would do, or the reason it would refuse. Read-only.
pub async fn plan(server: &Server, opts: &TableOptions) -> Result<Status, Error> {
    let s = status(server, opts).await?;
    s.check()?;
    Ok(s)
}

/// How `apply` runs.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub lock: LockConfig,
    /// Stop after this version (staged rollouts, tests); `None` applies everything.
    pub up_to: Option<u32>,
    /// Who is applying, recorded in the ledger and shown to waiting appliers.
    pub applied_by: String,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            lock: LockConfig::default(),
            up_to: None,
            applied_by: default_applier(),
        }
    }
}

/// `host/pid` of this process.
pub fn default_applier() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into());
    format!("{host}/{}", std::process::id())
}

/// One migration `apply` recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: u32,
    pub name: &'static str,
    pub mode: Mode,
    pub notes: Vec<String>,
}

/// What `apply` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    /// Recorded by this call, in order; empty when everything was already applied.
    pub applied: Vec<Applied>,
    /// The status after the run.
    pub status: Status,
}

/// Creates what is missing, under the schema lock. Idempotent: a second call finds
/// everything recorded and changes nothing. Refuses (before running anything) on a
/// checksum mismatch, an unknown newer migration or an object it cannot adopt.
pub async fn apply(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
) -> Result<ApplyReport, Error> {
    opts.validate()?;
    layouts::check_server(server, opts).await?;
    bootstrap(server, opts).await?;
    let mut lock = SchemaLock::acquire(server, opts, &options.applied_by, &options.lock).await?;
    let result = apply_locked(server, opts, options, &mut lock).await;
    if let Err(e) = lock.release().await {
        // The lease runs out by itself; the outcome of the migrations stands.
        tracing::warn!(error = %e, "could not release the schema lock");
    }
    let applied = result?;
    Ok(ApplyReport {
        applied,
        status: status(server, opts).await?,
    })
}

/// The database and the bookkeeping tables. `IF NOT EXISTS` makes these safe to
/// repeat and to race, which they must be: the lock lives in one of them.
async fn bootstrap(server: &Server, opts: &TableOptions) -> Result<(), Error> {
    for (what, sql) in [
        ("create the database", ddl::create_database(opts)),
        (
            "create the migration ledger",
            ledger::create_ledger_table(opts),
        ),
        (
            "create the schema lock table",
            lock::create_lock_table(opts),
        ),
    ] {
        match server.execute(what, &sql).await {
            // A concurrent `IF NOT EXISTS` can still lose the race inside the server
            // and report "already exists": the object is there, which is the point.
            Err(e) if matches!(e.server_code(), Some(57 | 82)) => {}
            other => other?,
        }
    }
    Ok(())
}

async fn apply_locked(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
    lock: &mut SchemaLock,
) -> Result<Vec<Applied>, Error> {
    // Read again under the lock: another applier may have finished meanwhile.
    let current = status(server, opts).await?;
    current.check()?;
    let mut done = Vec::new();
    for (m, action) in current.pending() {
        if options.up_to.is_some_and(|v| m.version > v) {
            break;
        }
        // Verify we still hold the lock and start a fresh lease before each step.
        lock.renew().await?;
        let started = Instant::now();
        let (mode, notes) = match action {
            Action::Run => {
                for sql in &m.statements {
                    let what = format!("migration {:04} {}", m.version, m.name);
                    server.execute(&what, sql).await?;
                }
                (Mode::Applied, Vec::new())
            }
            Action::Adopt { notes } => (Mode::Adopted, notes.clone()),
            Action::NoOp if m.opt_in.is_some() => (Mode::Skipped, Vec::new()),
            Action::NoOp => (Mode::NoOp, Vec::new()),
            // `check()` above already refused these; never record one as done.
            Action::Conflict { differences } => {
                return Err(Error::ShapeMismatch {
                    object: format!("{}.{}", opts.database, opts.table),
                    differences: differences.clone(),
                });
            }
        };
        record(server, opts, options, lock, started, m, mode).await?;
        tracing::info!(
            version = m.version,
            name = m.name,
            mode = mode.as_str(),
            "migration recorded"
        );
        done.push(Applied {
            version: m.version,
            name: m.name,
            mode,
            notes,
        });
    }
    let stopped_early = options
        .up_to
        .is_some_and(|v| v < migrations::LATEST_VERSION);
    if !stopped_early && let Some(changed) = set_window(server, opts, options, lock).await? {
        done.push(changed);
    }
    if !stopped_early && let Some(changed) = set_ttl(server, opts, options, lock).await? {
        done.push(changed);
    }
    Ok(done)
}

/// The name of a retention change in the ledger and the report.
pub const SET_TTL: &str = "set_ttl";

/// Brings every table's TTL to the options' (read again under the lock), recorded.
async fn set_ttl(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
    lock: &mut SchemaLock,
) -> Result<Option<Applied>, Error> {
    let adopted = traces_table_adopted(&ledger::read(server, opts).await?);
    let (before, changes) = ttl_status(server, opts, adopted).await?;
    if changes.is_empty() {
        return Ok(None);
    }
    lock.renew().await?;
    let started = Instant::now();
    for sql in &changes {
        server.execute("change the retention (TTL)", sql).await?;
    }
    let change = Rendered {
        version: ledger::SETTINGS_VERSION,
        name: SET_TTL,
        checksum: migrations::checksum(&changes),
        statements: changes.clone(),
        creates: None,
        opt_in: None,
    };
    record(server, opts, options, lock, started, &change, Mode::Applied).await?;
    let note = format!(
        "TTL {} -> {}",
        before.as_deref().unwrap_or("none"),
        retention::desired_ttl(opts, "Timestamp")
            .as_deref()
            .unwrap_or("none")
    );
    tracing::info!(%note, "retention changed");
    Ok(Some(Applied {
        version: ledger::SETTINGS_VERSION,
        name: SET_TTL,
        mode: Mode::Applied,
        notes: vec![note],
    }))
}

/// The name of a window change in the ledger and the report.
pub const SET_WINDOW: &str = "set_deduplication_window";

/// Records a step done under the lock in the ledger. The lock is verified first: a statement
/// that outlived our lease may have raced a new holder, which then adopts the object;
/// recording it too would double the ledger row.
async fn record(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
    lock: &SchemaLock,
    started: Instant,
    step: &Rendered,
    mode: Mode,
) -> Result<(), Error> {
    lock.verify().await?;
    let what = if step.version == ledger::SETTINGS_VERSION {
        "record the setting change in the ledger"
    } else {
        "record the migration in the ledger"
    };
    let ctx = RecordContext {
        applied_by: &options.applied_by,
        lock_token: lock.token(),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    server
        .execute(what, &ledger::record_sql(opts, step, mode, &ctx))
        .await
}

/// Raises every table's window to the options' (read again under the lock), recorded.
async fn set_window(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
    lock: &mut SchemaLock,
) -> Result<Option<Applied>, Error> {
    let Some(window) = window_status(server, opts).await? else {
        return Ok(None);
    };
    if window.changes.is_empty() {
        return Ok(None);
    }
    lock.renew().await?;
    let started = Instant::now();
    for sql in &window.changes {
        server
            .execute("change the deduplication window", sql)
            .await?;
    }
    let change = Rendered {
        version: ledger::SETTINGS_VERSION,
        name: SET_WINDOW,
        checksum: migrations::checksum(&window.changes),
        statements: window.changes.clone(),
        creates: None,
        opt_in: None,
    };
    record(server, opts, options, lock, started, &change, Mode::Applied).await?;
    let note = format!(
        "{} {} -> {}",
        window.setting,
        window
            .current
            .map_or_else(|| "unset".to_string(), |c| c.to_string()),
        window.desired
    );
    tracing::info!(%note, "deduplication window changed");
    Ok(Some(Applied {
        version: ledger::SETTINGS_VERSION,
        name: SET_WINDOW,
        mode: Mode::Applied,
        notes: vec![note],
    }))
}
