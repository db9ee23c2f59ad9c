//! The collector's start-up check of the table it will write to: is it there, does it
//! have the shape the collector's inserts need, and is its deduplication window large
//! enough for the pipeline (see [`crate::dedup_window`])? Read-only; the judgement
//! ([`judge`]) is pure, the caller decides what to warn about and what to refuse.

use std::fmt;

use crate::adopt::Verdict;
use crate::catalog;
use crate::client::Server;
use crate::dedup_window;
use crate::error::Error;
use crate::migrations::Creates;
use crate::model::TableOptions;

/// One thing wrong with the table, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableProblem {
    /// The traces table does not exist (run the schema migrations first).
    Missing,
    /// Its engine or columns differ from what the collector writes (each difference).
    Shape(Vec<String>),
    /// Its window is 0: a retried or replayed insert is stored twice.
    DeduplicationOff { setting: &'static str },
    /// Its window is smaller than this pipeline needs.
    WindowTooSmall {
        setting: &'static str,
        have: u64,
        need: u64,
    },
}

impl TableProblem {
    /// True for problems under which every insert fails (refuse to start); the window
    /// problems lose nothing by themselves, they risk duplicates on replays (warn).
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Missing | Self::Shape(_))
    }
}

impl fmt::Display for TableProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("the traces table does not exist"),
            Self::Shape(d) => write!(f, "the traces table's shape differs: {}", d.join("; ")),
            Self::DeduplicationOff { setting } => write!(
                f,
                "{setting} is 0: retried and replayed inserts will be stored twice"
            ),
            Self::WindowTooSmall {
                setting,
                have,
                need,
            } => write!(
                f,
                "{setting} is {have}, this pipeline needs at least {need} blocks: a replay \
                 after a crash may come back after its token left the window and be stored twice"
            ),
        }
    }
}

/// What the start-up check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCheck {
    /// Empty when all is well.
    pub problems: Vec<TableProblem>,
    /// The table's deduplication window (its setting or the engine default); `None` for
    /// an engine without one (`Null`) or a missing table.
    pub dedup_window: Option<u64>,
    /// The window's time bound on an engine that keeps block ids in Keeper (replicated,
    /// Cloud's shared), its setting or the server's default; `None` otherwise.
    pub dedup_window_seconds: Option<u64>,
}

/// The pure judgement: `shape` is the adoption verdict of the traces table (`None`:
/// missing), `window` its window with the engine's setting name, `need` what the
/// pipeline needs ([`dedup_window::PipelineShape::required_window`]).
pub fn judge(
    shape: Option<&Verdict>,
    window: Option<(&'static str, u64)>,
    need: Option<u64>,
) -> Vec<TableProblem> {
    let mut problems = Vec::new();
    match shape {
        None => return vec![TableProblem::Missing],
        Some(Verdict::Conflict { differences }) => {
            problems.push(TableProblem::Shape(differences.clone()));
        }
        Some(Verdict::Adopt { .. }) => {}
    }
    match (window, need) {
        (Some((setting, 0)), _) => problems.push(TableProblem::DeduplicationOff { setting }),
        (Some((setting, have)), Some(need)) if have < need => {
            problems.push(TableProblem::WindowTooSmall {
                setting,
                have,
                need,
            });
        }
        _ => {}
    }
    problems
}

/// Reads the traces table of `opts` and judges it; `need` is the window the pipeline
/// needs (`None` skips that comparison).
pub async fn check_table(
    server: &Server,
    opts: &TableOptions,
    need: Option<u64>,
) -> Result<TableCheck, Error> {
    let shape = catalog::inspect(server, opts, &Creates::TracesTable(opts.table.clone())).await?;
    // The count of the engine the server reports (Cloud's SharedMergeTree for a MergeTree),
    // its value or the server's default (unknown reads as 0: off, and said so).
    let mut seconds = None;
    let window = match dedup_window::desired_setting(opts) {
        Some(_) => {
            let tables =
                catalog::create_queries(server, &opts.database, std::slice::from_ref(&opts.table))
                    .await?;
            match tables.first() {
                Some((_, q)) => {
                    let defaults = catalog::server_defaults(server).await;
                    let settings =
                        dedup_window::desired_settings(opts, dedup_window::engine_in(q), 0);
                    seconds = settings
                        .iter()
                        .find(|d| d.name == dedup_window::REPLICATED_SECONDS_SETTING)
                        .and_then(|d| dedup_window::current_value(d.name, q, &defaults));
                    settings.first().map(|d| {
                        let have = dedup_window::current_value(d.name, q, &defaults);
                        (d.name, have.unwrap_or(0))
                    })
                }
                None => None,
            }
        }
        None => None,
    };
    Ok(TableCheck {
        problems: judge(shape.as_ref(), window, need),
        dedup_window: window.map(|(_, w)| w),
        dedup_window_seconds: seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup_window::NON_REPLICATED_SETTING as S;

    fn ok() -> Verdict {
        Verdict::Adopt { notes: Vec::new() }
    }

    #[test]
    fn a_good_table_with_a_large_enough_window_has_no_problem() {
        assert!(judge(Some(&ok()), Some((S, 2_880)), Some(2_880)).is_empty());
        assert!(judge(Some(&ok()), Some((S, 1_000)), None).is_empty());
        assert!(
            judge(Some(&ok()), None, Some(1_000)).is_empty(),
            "Null engine"
        );
    }

    #[test]
    fn a_missing_or_misshapen_table_is_fatal() {
        let missing = judge(None, None, Some(1));
        assert_eq!(missing, vec![TableProblem::Missing]);
        assert!(missing[0].is_fatal());
        let bad = Verdict::Conflict {
            differences: vec!["column `Duration` is String, the model has UInt64".into()],
        };
        let p = judge(Some(&bad), Some((S, 5_000)), Some(1_000));
        assert_eq!(p.len(), 1);
        assert!(p[0].is_fatal());
        assert!(
            p[0].to_string().contains("`Duration` is String"),
            "{}",
            p[0]
        );
    }

    #[test]
    fn a_small_or_disabled_window_is_a_warning_naming_the_figures() {
        let p = judge(Some(&ok()), Some((S, 1_000)), Some(46_080));
        assert_eq!(
            p,
            vec![TableProblem::WindowTooSmall {
                setting: S,
                have: 1_000,
                need: 46_080
            }]
        );
        assert!(!p[0].is_fatal());
        assert!(
            p[0].to_string()
                .contains("is 1000, this pipeline needs at least 46080")
        );
        let off = judge(Some(&ok()), Some((S, 0)), None);
        assert_eq!(off, vec![TableProblem::DeduplicationOff { setting: S }]);
        assert!(!off[0].is_fatal());
    }
}
