//! The async API the CLI and the operator call: [`status()`], [`plan`] and [`apply`]. What
//! each migration's state means is [`mod@crate::status`]'s; what the server has is read
//! through [`crate::catalog`], the ledger through [`crate::ledger_io`].
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

use crate::adopt::Verdict;
use crate::catalog;
use crate::client::Server;
use crate::ddl;
use crate::dedup_window;
use crate::error::Error;
use crate::layouts;
use crate::ledger::{self, Mode};
use crate::ledger_io;
use crate::lock::{self, LockConfig, SchemaLock};
use crate::migrations::{self, Rendered};
use crate::model::TableOptions;
use crate::retention;
use crate::status::{
    self, Action, MigrationStatus, State, Status, recorded_state, traces_table_adopted,
};

/// Where every migration of `opts.table` stands. Read-only.
pub async fn status(server: &Server, opts: &TableOptions) -> Result<Status, Error> {
    let rendered = migrations::render_all(opts)?;
    let records = ledger_io::read(server, opts).await?;
    let mut out = Vec::with_capacity(rendered.len());
    for m in rendered {
        let record = records.iter().find(|r| r.version == m.version);
        let state = match recorded_state(&m, record) {
            Some(state) => state,
            None => State::Pending(pending_action(server, opts, &m).await?),
        };
        out.push(MigrationStatus {
            migration: m,
            state,
        });
    }
    let known = migrations::MIGRATIONS.len() as u32;
    let (ttl, ttl_changes) =
        retention::read::ttl_status(server, opts, traces_table_adopted(&records)).await?;
    Ok(Status {
        migrations: out,
        kept_layouts: status::kept(opts, &records),
        unknown: records.into_iter().filter(|r| r.version > known).collect(),
        window: dedup_window::read::window_status(server, opts).await?,
        ttl_changes,
        ttl,
        target: format!("{}.{}", opts.database, opts.table),
    })
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
    Ok(match catalog::inspect(server, opts, creates).await? {
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
    layouts::check_options(opts)?;
    catalog::check_layouts_gate(server, opts).await?;
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
        ledger_io::record(server, opts, &options.applied_by, lock, started, m, mode).await?;
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
    if stopped_early {
        return Ok(done);
    }
    // Read again under the lock, each right before it runs.
    if let Some(w) = dedup_window::read::window_status(server, opts).await? {
        let note = format!(
            "{} {} -> {}",
            w.setting,
            w.current
                .map_or_else(|| "unset".to_string(), |c| c.to_string()),
            w.desired
        );
        let step = SettingChange {
            name: SET_WINDOW,
            what: "change the deduplication window",
            changes: w.changes,
            note,
        };
        done.extend(apply_setting(server, opts, options, lock, step).await?);
    }
    let adopted = traces_table_adopted(&ledger_io::read(server, opts).await?);
    let (before, changes) = retention::read::ttl_status(server, opts, adopted).await?;
    let note = format!(
        "TTL {} -> {}",
        before.as_deref().unwrap_or("none"),
        retention::desired_ttl(opts, "Timestamp")
            .as_deref()
            .unwrap_or("none")
    );
    let step = SettingChange {
        name: SET_TTL,
        what: "change the retention (TTL)",
        changes,
        note,
    };
    done.extend(apply_setting(server, opts, options, lock, step).await?);
    Ok(done)
}

/// The name of a retention change in the ledger and the report.
pub const SET_TTL: &str = "set_ttl";

/// The name of a window change in the ledger and the report.
pub const SET_WINDOW: &str = "set_deduplication_window";

/// A change of a table setting that is desired state (the window, the TTL): the statements
/// that bring the tables to the options', read under the lock.
struct SettingChange {
    name: &'static str,
    /// What the statements do, for errors.
    what: &'static str,
    changes: Vec<String>,
    /// `before -> after`, for the log and the report.
    note: String,
}

/// Runs a setting change under the lock and records it in the ledger as a setting step
/// ([`ledger::SETTINGS_VERSION`]); nothing when there is nothing to change.
async fn apply_setting(
    server: &Server,
    opts: &TableOptions,
    options: &ApplyOptions,
    lock: &mut SchemaLock,
    step: SettingChange,
) -> Result<Option<Applied>, Error> {
    if step.changes.is_empty() {
        return Ok(None);
    }
    lock.renew().await?;
    let started = Instant::now();
    for sql in &step.changes {
        server.execute(step.what, sql).await?;
    }
    let change = Rendered {
        version: ledger::SETTINGS_VERSION,
        name: step.name,
        checksum: migrations::checksum(&step.changes),
        statements: step.changes,
        creates: None,
        opt_in: None,
    };
    ledger_io::record(
        server,
        opts,
        &options.applied_by,
        lock,
        started,
        &change,
        Mode::Applied,
    )
    .await?;
    tracing::info!(note = %step.note, setting = step.name, "table setting changed");
    Ok(Some(Applied {
        version: ledger::SETTINGS_VERSION,
        name: step.name,
        mode: Mode::Applied,
        notes: vec![step.note],
    }))
}
