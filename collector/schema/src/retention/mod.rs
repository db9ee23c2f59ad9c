//! Retention (the TTL) as desired state, changed in place: `ALTER TABLE … MODIFY TTL` (or
//! `REMOVE TTL`) on the traces table and its lookup table when their TTL differs from the
//! options', recorded in the ledger as a setting change ([`crate::ledger::SETTINGS_VERSION`],
//! like the deduplication window), so changing `ttl` never needs a new table.
//!
//! Migrations 1 and 2 render the TTL into their `CREATE TABLE`; one recorded with another TTL
//! is the same migration ([`without_ttl`]): the TTL is desired state, not history.
//!
//! ClickHouse keeps the TTL in `create_table_query` as
//! `TTL toDateTime(Timestamp) + toIntervalDay(30)`; [`current_ttl`] reads it back from there.
//! `MODIFY TTL` also rewrites the TTL of existing parts (`materialize_ttl_after_modify`, on by
//! default), which on a large table is a background mutation, not an instant change.

#[cfg(feature = "server")]
pub mod read;

use crate::ident::Ident;
use crate::options::TableOptions;

/// The TTL expression `opts` asks of a table whose time column is `time_column`, as the
/// `CREATE TABLE` of the migrations writes it; `None` for no TTL or a table that stores
/// nothing.
pub fn desired_ttl(opts: &TableOptions, time_column: &str) -> Option<String> {
    opts.ttl
        .filter(|_| opts.is_stored())
        .map(|ttl| format!("toDateTime({time_column}) + {}", ttl.interval_sql()))
}

/// Whether the tables keep whatever TTL they have: a traces table adopted from another
/// writer (the OpenTelemetry exporter's, say) keeps the retention it came with while the
/// options ask for none. Adopting must not silently turn a table's expiry off; asking for a
/// TTL still changes it.
pub fn keeps_own_ttl(opts: &TableOptions, traces_table_adopted: bool) -> bool {
    traces_table_adopted && opts.ttl.is_none()
}

/// The TTL expression in a `create_table_query`, if it has one.
pub fn current_ttl(create_query: &str) -> Option<String> {
    let at = create_query.find(" TTL ")? + " TTL ".len();
    let rest = &create_query[at..];
    let end = rest.find(" SETTINGS ").unwrap_or(rest.len());
    Some(rest[..end].trim().to_owned())
}

fn same(a: &str, b: &str) -> bool {
    let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    squeeze(a) == squeeze(b)
}

/// The time column of each table that has a TTL: the traces table's and the lookup table's.
pub fn tables(opts: &TableOptions) -> Result<[(Ident, &'static str); 2], crate::Error> {
    Ok([
        (opts.table.clone(), "Timestamp"),
        (opts.lookup_table()?, "Start"),
    ])
}

/// `ALTER TABLE … MODIFY TTL` (or `REMOVE TTL`) for each of `tables` (with its
/// `create_table_query`, from `existing`) whose TTL is not what `opts` asks. Empty when all
/// are, so running the result is idempotent.
pub fn change_statements(
    opts: &TableOptions,
    tables: &[(Ident, &'static str)],
    existing: &[(Ident, String)],
) -> Vec<String> {
    tables
        .iter()
        .filter_map(|(table, column)| {
            let (_, create) = existing.iter().find(|(n, _)| n == table)?;
            let want = desired_ttl(opts, column);
            let have = current_ttl(create);
            let target = format!(
                "ALTER TABLE {}.{table}{}",
                opts.database,
                crate::ddl::on_cluster(opts)
            );
            match (want, have) {
                (Some(w), Some(h)) if same(&w, &h) => None,
                (Some(w), _) => Some(format!("{target} MODIFY TTL {w}")),
                (None, Some(_)) => Some(format!("{target} REMOVE TTL")),
                (None, None) => None,
            }
        })
        .collect()
}

/// The text of a migration with its TTL clause dropped: migration 1 or 2 recorded with
/// another TTL (or none) is the same migration.
pub fn without_ttl(statements: &str) -> String {
    statements
        .lines()
        .filter(|l| !l.trim_start().starts_with("TTL "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Ttl;

    fn opts(ttl: Option<&str>) -> TableOptions {
        TableOptions {
            ttl: ttl.map(|t| t.parse::<Ttl>().unwrap()),
            ..crate::model::default_options()
        }
    }

    const CREATED: &str = "CREATE TABLE otel.otel_traces (`Timestamp` DateTime64(9)) ENGINE = MergeTree PARTITION BY toDate(Timestamp) ORDER BY (ServiceName) TTL toDateTime(Timestamp) + toIntervalDay(30) SETTINGS index_granularity = 8192";

    #[test]
    fn the_ttl_is_read_back_from_the_create_query() {
        assert_eq!(
            current_ttl(CREATED).as_deref(),
            Some("toDateTime(Timestamp) + toIntervalDay(30)")
        );
        assert_eq!(
            current_ttl("CREATE TABLE t (x UInt8) ENGINE = MergeTree ORDER BY x SETTINGS a = 1"),
            None
        );
    }

    #[test]
    fn only_a_differing_ttl_is_changed_and_a_removed_one_removed() {
        let o = opts(Some("30d"));
        let tables = [(o.table.clone(), "Timestamp")];
        let existing = [(o.table.clone(), CREATED.to_owned())];
        assert!(change_statements(&o, &tables, &existing).is_empty());
        let seven = opts(Some("7d"));
        assert_eq!(
            change_statements(&seven, &tables, &existing),
            [
                "ALTER TABLE `otel`.`otel_traces` MODIFY TTL toDateTime(Timestamp) + toIntervalDay(7)"
            ]
        );
        assert_eq!(
            change_statements(&opts(None), &tables, &existing),
            ["ALTER TABLE `otel`.`otel_traces` REMOVE TTL"]
        );
        // A table that does not exist yet is the migrations' to create.
        assert!(change_statements(&seven, &tables, &[]).is_empty());
    }

    #[test]
    fn a_migration_recorded_with_another_ttl_is_the_same_migration() {
        let a = "CREATE TABLE t\n(\n  x UInt8\n)\nENGINE = MergeTree\nTTL toDateTime(Timestamp) + toIntervalDay(30)\nSETTINGS a = 1";
        let b = "CREATE TABLE t\n(\n  x UInt8\n)\nENGINE = MergeTree\nSETTINGS a = 1";
        assert_eq!(without_ttl(a), without_ttl(b));
    }

    #[test]
    fn an_adopted_table_keeps_its_ttl_unless_one_is_asked() {
        assert!(keeps_own_ttl(&opts(None), true));
        assert!(!keeps_own_ttl(&opts(None), false), "ours: none means none");
        assert!(!keeps_own_ttl(&opts(Some("7d")), true), "asked: changed");
    }
}
