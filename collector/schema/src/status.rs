//! Where a table's migrations stand, pure: what the ledger's rows say about each rendered
//! migration ([`recorded_state`]), the opt-in layouts' rules, and the [`Status`] that
//! `status`, `plan` and `apply` ([`crate::migrate`]) report and act on.

use crate::dedup_window::{self, WindowStatus};
use crate::error::Error;
use crate::layouts::{Layout, OptIn};
use crate::ledger::{AppliedRecord, Mode};
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
    pub(crate) target: String,
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

    /// The layouts the table has: recorded in the ledger as run (`applied` or `adopted`),
    /// asked for or not.
    pub fn applied_layouts(&self) -> Vec<Layout> {
        self.migrations
            .iter()
            .filter_map(|m| match (&m.state, m.migration.opt_in) {
                (State::Applied(r), Some(o)) if r.mode != Mode::Skipped.as_str() => Some(o.layout),
                _ => None,
            })
            .collect()
    }
}

/// Where migration `m` stands from its ledger row alone; `None` when it is pending and
/// unrecorded, so whether to run or adopt it depends on what the server has.
pub fn recorded_state(m: &Rendered, record: Option<&AppliedRecord>) -> Option<State> {
    let opt_in = m.opt_in.map(|o| opt_in_state(o, record));
    Some(match (opt_in, record) {
        (Some(OptInState::Recorded), Some(r)) => State::Applied(r.clone()),
        (Some(OptInState::Run), _) => State::Pending(Action::Run),
        // Recorded `skipped` by `apply` (see `migrate::apply_locked`).
        (Some(OptInState::Skip), _) => State::Pending(Action::NoOp),
        (_, Some(r)) if r.checksum == m.checksum || same_but_window(r, m) => {
            State::Applied(r.clone())
        }
        (_, Some(r)) => State::ChecksumMismatch(r.clone()),
        (_, None) => return None,
    })
}

/// Whether the ledger records the traces table (migration 1) as adopted from another writer.
pub fn traces_table_adopted(records: &[AppliedRecord]) -> bool {
    records
        .iter()
        .any(|r| r.version == 1 && r.mode == Mode::Adopted.as_str())
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

/// Where an opt-in migration stands, from the options and its ledger row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptInState {
    /// Counts as recorded: `skipped` and still not asked for, or applied (asked for or not:
    /// an applied layout is kept).
    Recorded,
    /// Asked for and not applied yet (no row, or `skipped`): run it.
    Run,
    /// Not asked for and not recorded: record it `skipped`.
    Skip,
    /// Asked for and recorded `applied`/`adopted`: compare its checksum as any migration's.
    Compare,
}

pub(crate) fn opt_in_state(opt_in: OptIn, record: Option<&AppliedRecord>) -> OptInState {
    let skipped = record.map(|r| r.mode == Mode::Skipped.as_str());
    match (opt_in.wanted, skipped) {
        (false, Some(_)) => OptInState::Recorded,
        (false, None) => OptInState::Skip,
        (true, None | Some(true)) => OptInState::Run,
        (true, Some(false)) => OptInState::Compare,
    }
}

/// The layouts recorded as applied that `opts` no longer ask for: kept on the table (never
/// dropped), worth a warning.
pub fn kept(opts: &TableOptions, records: &[AppliedRecord]) -> Vec<Layout> {
    Layout::ALL
        .into_iter()
        .filter(|l| !l.wanted(opts))
        .filter(|l| {
            records
                .iter()
                .any(|r| r.version == l.version() && r.mode != Mode::Skipped.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layouts::tests::with;

    fn record(version: u32, mode: Mode) -> AppliedRecord {
        AppliedRecord {
            version,
            name: "x".into(),
            checksum: String::new(),
            mode: mode.as_str().into(),
            applied_at: String::new(),
            applied_by: String::new(),
            records: 1,
            statements: String::new(),
        }
    }

    #[test]
    fn an_opt_in_migration_is_skipped_run_kept_or_compared() {
        let want = |wanted| OptIn {
            layout: Layout::AttributeItems,
            wanted,
        };
        let skipped = record(6, Mode::Skipped);
        let applied = record(6, Mode::Applied);
        let adopted = record(6, Mode::Adopted);
        // Not asked for: recorded `skipped` once, then up to date.
        assert_eq!(opt_in_state(want(false), None), OptInState::Skip);
        assert_eq!(
            opt_in_state(want(false), Some(&skipped)),
            OptInState::Recorded
        );
        // Asked for later: runs although a `skipped` row exists.
        assert_eq!(opt_in_state(want(true), None), OptInState::Run);
        assert_eq!(opt_in_state(want(true), Some(&skipped)), OptInState::Run);
        assert_eq!(
            opt_in_state(want(true), Some(&applied)),
            OptInState::Compare
        );
        assert_eq!(
            opt_in_state(want(true), Some(&adopted)),
            OptInState::Compare
        );
        // Not asked for any more: kept as recorded, never dropped, and listed.
        assert_eq!(
            opt_in_state(want(false), Some(&applied)),
            OptInState::Recorded
        );
        let plain = with(false, false);
        assert_eq!(
            kept(
                &plain,
                &[record(6, Mode::Applied), record(7, Mode::Skipped)]
            ),
            vec![Layout::AttributeItems]
        );
        assert!(kept(&with(true, false), &[record(6, Mode::Applied)]).is_empty());
    }
}
