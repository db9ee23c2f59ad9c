//! The traces table's insert-deduplication window: how large a pipeline needs it, which
//! table setting carries it on each engine, and the statements that change it. Pure.
//!
//! ## Why it must be sized (issue 30, finding 6)
//!
//! A replayed batch is dropped as a duplicate only while its token is still among the
//! last `W` blocks the table remembers, and that count is **table-wide**: every block any
//! partition inserts pushes the oldest token out. Each active partition inserts at least
//! one block per `linger` (the timer cuts a batch even when few records came), so in a
//! time `H`, `P` partitions insert at least `P × H / linger` blocks. A block whose rows
//! fall on two days (the table is `PARTITION BY toDate(Timestamp)`) is stored as two parts
//! with two tokens, so a block counts twice at worst. The token must survive until the
//! latest moment it can come back:
//!
//! - `session timeout`: a consumer killed with -9 keeps its partitions until the group
//!   coordinator gives up on it (30 s, `session.timeout.ms`); only then does the next owner
//!   replay its last batches;
//! - `retry horizon`: how much later a batch may still be sent again — the new owner's
//!   catch-up, a held batch waiting for its cut to be recorded, a replayed batch waiting up
//!   to `REPLAY_LINGER` (30 s) for its recorded end, an old owner's insert retries. 60 s by
//!   default.
//!
//! ```text
//! W = safety × parts_per_block × P × ceil((session_timeout + retry_horizon) / linger)
//!   = 2 × 2 × P × ceil(90 s / 1 s)   at the defaults
//!   = 360 × P                        (8 partitions: 2 880; 128 partitions: 46 080)
//! ```
//!
//! The old fixed 1 000 covered `P ≤ 2` at these figures; the kill -9 runs on 128
//! partitions in issue 30 duplicated 1 600 and 2 000 spans with it. The window is clamped
//! to [`MAX_WINDOW`]. A bigger window costs little: a plain MergeTree keeps one hash per
//! block in memory and in its `deduplication_logs` file (tens of bytes each, ~5 MB at a
//! 100 000-block window); a replicated table keeps them in Keeper, which is why its
//! window is never lowered below the server's default of 10 000 blocks.
//!
//! More collectors or pipelines writing the same table share its window: size it for
//! the sum of their partitions.
//!
//! ## Engines that keep block ids in Keeper (issue 41, finding 5)
//!
//! A `ReplicatedMergeTree` — and ClickHouse Cloud's `SharedMergeTree`, which Cloud makes of
//! every `MergeTree` it is asked for — keeps block ids in Keeper, and keeps one only while
//! it is within **both** `replicated_deduplication_window` (blocks) and
//! `replicated_deduplication_window_seconds` (3 600 since 25.10; a week before). So both
//! are sized: the count as above, the seconds as `safety × (session timeout + retry
//! horizon)` (180 s at the defaults). Which settings a table takes is read from the engine
//! `system.tables` names for it, not from the options (Cloud answers `SharedMergeTree` to a
//! `MergeTree` DDL), and a setting the table does not set is read from
//! `system.merge_tree_settings` — never assumed: the replicated count defaults to 1 000
//! before 25.9 and 10 000 after. What a replicated or Cloud engine does with these
//! statements cannot run here (chdb has no Keeper): it is proven on paper, by the unit
//! tests below over recorded `system.*` rows and the exact statements.
//!
//! ## Only ever raised
//!
//! [`change_statements`] raises a table's window to the one asked for and never lowers
//! it: a window too large costs a little memory, one too small duplicates rows. So two
//! pipelines (or the operator and a `schema apply` with the CLI's default) that ask for
//! different windows on one table do not undo each other: the largest stands. Lowering a
//! window is a deliberate act, by hand (`ALTER TABLE … MODIFY SETTING`).

#[cfg(feature = "server")]
pub mod read;

use std::time::Duration;

use crate::ident::Ident;
use crate::model::{Engine, TableOptions};

/// `session.timeout.ms` of the collector's consumer.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// How much later than its first send a batch may still be sent again (see the module).
pub const DEFAULT_RETRY_HORIZON: Duration = Duration::from_secs(60);
/// Headroom over the arithmetic: more than one block per linger at high rates, uneven
/// partitions, a slow rebalance.
pub const DEFAULT_SAFETY: u64 = 2;
/// A block whose rows span midnight is stored as two parts, each with its own token.
pub const PARTS_PER_BLOCK: u64 = 2;
/// The largest window we set (the `TracePipeline`'s `dedupWindow` accepts up to this).
pub const MAX_WINDOW: u64 = 1_000_000;
/// ClickHouse's default `replicated_deduplication_window` from 25.9 (1 000 before): what a
/// replicated window is never asked below (the server's own default is read, not assumed:
/// [`ServerDefaults`]).
pub const REPLICATED_DEFAULT_WINDOW: u64 = 10_000;

/// The setting that holds the window of a plain MergeTree.
pub const NON_REPLICATED_SETTING: &str = "non_replicated_deduplication_window";
/// The setting that holds the window of a ReplicatedMergeTree (and a SharedMergeTree).
pub const REPLICATED_SETTING: &str = "replicated_deduplication_window";
/// The time bound of a Keeper-kept window: a block id older than this is forgotten
/// whatever the count.
pub const REPLICATED_SECONDS_SETTING: &str = "replicated_deduplication_window_seconds";

/// What the window depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineShape {
    /// Partitions of every topic that writes into the table, summed.
    pub partitions: u64,
    /// The batch linger (`batch.linger_ms`): the longest a partition goes without a block.
    pub linger: Duration,
    pub session_timeout: Duration,
    pub retry_horizon: Duration,
    pub safety: u64,
}

impl PipelineShape {
    /// `partitions` and `linger` with the default timeouts and safety factor.
    pub fn new(partitions: u64, linger: Duration) -> Self {
        Self {
            partitions,
            linger,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            retry_horizon: DEFAULT_RETRY_HORIZON,
            safety: DEFAULT_SAFETY,
        }
    }

    /// The window this pipeline needs (the formula of the module header), in
    /// `1..=MAX_WINDOW`.
    pub fn required_window(&self) -> u64 {
        let horizon_ms = (self.session_timeout + self.retry_horizon).as_millis();
        // A zero linger still cuts at most one batch per millisecond of timer resolution.
        let linger_ms = self.linger.as_millis().max(1);
        let lingers = u64::try_from(horizon_ms.div_ceil(linger_ms)).unwrap_or(u64::MAX);
        self.safety
            .max(1)
            .saturating_mul(PARTS_PER_BLOCK)
            .saturating_mul(self.partitions.max(1))
            .saturating_mul(lingers.max(1))
            .min(MAX_WINDOW)
    }

    /// How long a token must be remembered: the latest it can come back, with the safety
    /// factor (whole seconds, at least 1).
    pub fn required_seconds(&self) -> u64 {
        let horizon = (self.session_timeout + self.retry_horizon).as_secs().max(1);
        self.safety.max(1).saturating_mul(horizon)
    }
}

/// Whether the engine `system.tables` names keeps its block ids in Keeper (replicated, and
/// Cloud's shared engines), where the window has a time bound beside its count.
pub fn keeps_ids_in_keeper(engine: &str) -> bool {
    engine.starts_with("Replicated") || engine.starts_with("Shared")
}

/// The server's defaults of the window settings, from `system.merge_tree_settings`
/// (`name`, `value`): what a table that does not set one has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerDefaults(Vec<(String, u64)>);

impl ServerDefaults {
    /// The rows of `SELECT name, value FROM system.merge_tree_settings WHERE name IN (…)`.
    pub fn from_rows<'a>(rows: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self(
            rows.into_iter()
                .filter_map(|(n, v)| Some((n.to_string(), v.trim().parse().ok()?)))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// The engine a `CREATE TABLE` statement (as `system.tables.create_table_query` shows it)
/// names: `SharedMergeTree` on ClickHouse Cloud for a table asked as `MergeTree`.
pub fn engine_in(create_query: &str) -> Option<&str> {
    let at = create_query.find(" ENGINE = ")? + " ENGINE = ".len();
    let rest = &create_query[at..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The settings whose server defaults [`ServerDefaults`] needs.
pub const WINDOW_SETTINGS: [&str; 3] = [
    NON_REPLICATED_SETTING,
    REPLICATED_SETTING,
    REPLICATED_SECONDS_SETTING,
];

/// The window to ask for, from what the user asked (`requested`: a floor; 0 asks for no
/// deduplication, which only a table created now gets) and what the pipeline needs.
pub fn effective_window(requested: u64, required: u64) -> u64 {
    if requested == 0 {
        0
    } else {
        requested.max(required).min(MAX_WINDOW)
    }
}

/// One deduplication setting of one table, as the engine names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowSetting {
    pub name: &'static str,
    pub value: u64,
}

/// Every window setting the table needs: [`desired_setting`] for the engine `engine`
/// (`system.tables.engine`, when the table exists: it wins over the options, since Cloud
/// makes a `SharedMergeTree` of a `MergeTree`), and for a Keeper-kept window its time bound
/// of `seconds` ([`PipelineShape::required_seconds`]).
pub fn desired_settings(
    opts: &TableOptions,
    engine: Option<&str>,
    seconds: u64,
) -> Vec<WindowSetting> {
    let keeper = match (engine, &opts.engine) {
        (_, Engine::Null) => return Vec::new(),
        (Some(e), _) => keeps_ids_in_keeper(e),
        (None, Engine::Replicated(_)) => true,
        (None, Engine::MergeTree) => false,
    };
    if !keeper {
        return vec![WindowSetting {
            name: NON_REPLICATED_SETTING,
            value: opts.dedup_window,
        }];
    }
    vec![
        WindowSetting {
            name: REPLICATED_SETTING,
            value: opts.dedup_window.max(REPLICATED_DEFAULT_WINDOW),
        },
        WindowSetting {
            name: REPLICATED_SECONDS_SETTING,
            value: seconds,
        },
    ]
}

/// The value a table has for `name`: its own (`create_query`'s `SETTINGS`), or the server's
/// default; `None` when neither can be read (then it is set, never assumed).
pub fn current_value(name: &str, create_query: &str, defaults: &ServerDefaults) -> Option<u64> {
    setting_in(create_query, name).or_else(|| defaults.get(name))
}

/// `ALTER TABLE … MODIFY SETTING` raising, on each of `tables` (name, create query), every
/// one of `desired` that is smaller there or unknown; one statement per table, none when
/// all hold (idempotent), never lowering one.
pub fn change_statements(
    opts: &TableOptions,
    desired: &[WindowSetting],
    tables: &[(Ident, String)],
    defaults: &ServerDefaults,
) -> Vec<String> {
    tables
        .iter()
        .filter_map(|(table, create)| {
            let raise: Vec<String> = desired
                .iter()
                .filter(|d| d.value > 0)
                .filter(|d| current_value(d.name, create, defaults).is_none_or(|c| c < d.value))
                .map(|d| format!("{} = {}", d.name, d.value))
                .collect();
            (!raise.is_empty()).then(|| {
                format!(
                    "ALTER TABLE {}.{table}{} MODIFY SETTING {}",
                    opts.database,
                    crate::ddl::on_cluster(opts),
                    raise.join(", ")
                )
            })
        })
        .collect()
}

/// The window setting `opts` asks for on its engine, if the engine has one: the plain
/// window as given; a replicated one never below the server's default; none for `Null`.
pub fn desired_setting(opts: &TableOptions) -> Option<WindowSetting> {
    desired_settings(opts, None, 0).into_iter().next()
}

/// The value of `name` in a `SETTINGS` clause of a `CREATE TABLE` statement (as
/// `system.tables.create_table_query` shows it), if set there.
pub fn setting_in(create_query: &str, name: &str) -> Option<u64> {
    let at = create_query.rfind(" SETTINGS ")?;
    create_query[at + " SETTINGS ".len()..]
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == name)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// The text of a window statement with its number blanked: migration 5 recorded with
/// another window is the same migration (the window is desired state, changed by
/// [`change_statements`], not history).
pub fn without_window_values(statements: &str) -> String {
    let mut out = String::with_capacity(statements.len());
    let mut rest = statements;
    while let Some(at) = rest.find("deduplication_window = ") {
        let end = at + "deduplication_window = ".len();
        out.push_str(&rest[..end]);
        out.push('N');
        rest = rest[end..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
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

#[cfg(test)]
mod tests;
