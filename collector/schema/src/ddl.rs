//! SQL rendering: pure functions from [`TableOptions`] (and the model) to statements.
//!
//! No IO here. Every user-supplied name enters through [`Ident`]'s quoted form and
//! every free-text value through [`quote_str`]; everything else is a constant of
//! this crate.

use std::fmt::Write as _;

use crate::error::Error;
use crate::ident::{Ident, quote_ident, quote_str};
use crate::model::{
    self, Attributes, Column, Engine, Index, TableOptions, columns, indexes, lookup_columns,
    order_by,
};

/// ` ON CLUSTER `c`` for replicated tables, empty otherwise.
pub fn on_cluster(opts: &TableOptions) -> String {
    match opts.cluster() {
        Some(c) => format!(" ON CLUSTER {c}"),
        None => String::new(),
    }
}

/// `` `db`.`name` ``.
pub fn qualified(opts: &TableOptions, name: &Ident) -> String {
    format!("{}.{}", opts.database, name)
}

/// `CREATE DATABASE IF NOT EXISTS`: bootstrap, safe to repeat and to race.
pub fn create_database(opts: &TableOptions) -> String {
    format!(
        "CREATE DATABASE IF NOT EXISTS {}{}",
        opts.database,
        on_cluster(opts)
    )
}

/// The `ENGINE = …` value for a stored table named by the server's `{table}` macro.
pub(crate) fn merge_tree_engine(opts: &TableOptions) -> String {
    match &opts.engine {
        Engine::Replicated(r) => format!(
            "ReplicatedMergeTree({}, {})",
            quote_str(&r.zk_path),
            quote_str(&r.replica)
        ),
        Engine::MergeTree | Engine::Null => "MergeTree".into(),
    }
}

fn render_column(out: &mut String, name: &str, ty: &str, codec: &model::Codec) {
    write!(out, "    {} {ty}", quote_ident(name)).unwrap();
    if !codec.is_default() {
        write!(out, " CODEC({codec})").unwrap();
    }
}

fn render_index(idx: &Index) -> String {
    format!(
        "INDEX {} {} TYPE {} GRANULARITY {}",
        quote_ident(idx.name),
        idx.expr,
        idx.kind,
        idx.granularity
    )
}

/// The column list of a `CREATE TABLE`, with `Nested` columns regrouped the way the
/// exporter declares them: `Events Nested (Timestamp DateTime64(9), …) CODEC(ZSTD(1))`.
fn render_columns(cols: &[Column]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cols.len() {
        let c = &cols[i];
        let mut line = String::new();
        match c.id.nested() {
            None => render_column(&mut line, c.name(), &c.ch_type.to_string(), &c.codec),
            Some((parent, _)) => {
                let group: Vec<&Column> = cols[i..]
                    .iter()
                    .take_while(|g| g.id.nested().map(|(p, _)| p) == Some(parent))
                    .collect();
                let fields: Vec<String> = group
                    .iter()
                    .map(|g| {
                        let (_, field) = g.id.nested().unwrap_or_default();
                        let elem = g.ch_type.array_element().unwrap_or(&g.ch_type);
                        format!("        {} {elem}", quote_ident(field))
                    })
                    .collect();
                write!(
                    line,
                    "    {} Nested (\n{}\n    )",
                    quote_ident(parent),
                    fields.join(",\n")
                )
                .unwrap();
                // One codec for the group: the model gives every field the same one.
                if !c.codec.is_default() {
                    write!(line, " CODEC({})", c.codec).unwrap();
                }
                i += group.len() - 1;
            }
        }
        out.push(line);
        i += 1;
    }
    out
}

/// The TTL clause on `time_column`, or empty.
fn ttl_clause(opts: &TableOptions, time_column: &str) -> String {
    match opts.ttl {
        Some(ttl) if opts.is_stored() => {
            format!("\nTTL toDateTime({time_column}) + {}", ttl.interval_sql())
        }
        _ => String::new(),
    }
}

/// `CREATE TABLE` for the traces table with every column and index of `version` or
/// earlier: the OTel exporter's table, plus what later migrations add when rendered
/// at a later version.
pub fn create_traces_table(opts: &TableOptions, version: u32) -> String {
    let cols: Vec<Column> = columns(opts)
        .into_iter()
        .filter(|c| c.since <= version)
        .collect();
    let mut items = render_columns(&cols);
    items.extend(
        indexes(opts)
            .iter()
            .filter(|i| i.since <= version)
            .map(|i| format!("    {}", render_index(i))),
    );
    let mut sql = format!(
        "CREATE TABLE {}{}\n(\n{}\n)",
        qualified(opts, &opts.table),
        on_cluster(opts),
        items.join(",\n")
    );
    if opts.is_stored() {
        write!(
            sql,
            "\nENGINE = {}\nPARTITION BY {}\nORDER BY {}{}\nSETTINGS index_granularity = 8192, ttl_only_drop_parts = 1",
            merge_tree_engine(opts),
            model::PARTITION_BY,
            order_by(opts.attributes),
            ttl_clause(opts, "Timestamp"),
        )
        .unwrap();
    } else {
        sql.push_str("\nENGINE = Null");
    }
    sql
}

/// `CREATE TABLE <table>_trace_id_ts`: first and last second of each trace id.
pub fn create_lookup_table(opts: &TableOptions) -> Result<String, Error> {
    let mut items: Vec<String> = lookup_columns()
        .iter()
        .map(|c| {
            let mut s = String::new();
            render_column(&mut s, c.name, &c.ch_type.to_string(), &c.codec);
            s
        })
        .collect();
    items.push("    INDEX `idx_trace_id` TraceId TYPE bloom_filter(0.01) GRANULARITY 1".into());
    Ok(format!(
        "CREATE TABLE {}{}\n(\n{}\n)\nENGINE = {}\nPARTITION BY toDate(Start)\nORDER BY (TraceId, Start){}\nSETTINGS index_granularity = 8192, ttl_only_drop_parts = 1",
        qualified(opts, &opts.lookup_table()?),
        on_cluster(opts),
        items.join(",\n"),
        merge_tree_engine(opts),
        ttl_clause(opts, "Start"),
    ))
}

/// `CREATE MATERIALIZED VIEW <table>_trace_id_ts_mv TO <table>_trace_id_ts`.
pub fn create_lookup_view(opts: &TableOptions) -> Result<String, Error> {
    Ok(format!(
        "CREATE MATERIALIZED VIEW {}{} TO {}\nAS SELECT\n    TraceId,\n    min(Timestamp) AS Start,\n    max(Timestamp) AS End\nFROM {}\nWHERE TraceId != ''\nGROUP BY TraceId",
        qualified(opts, &opts.lookup_view()?),
        on_cluster(opts),
        qualified(opts, &opts.lookup_table()?),
        qualified(opts, &opts.table),
    ))
}

/// `ALTER TABLE … ADD INDEX IF NOT EXISTS …` for the indexes `version` adds, or
/// `None` if it adds none to this variant. `IF NOT EXISTS` keeps the step harmless on
/// an adopted table that already has the index.
pub fn add_indexes(opts: &TableOptions, version: u32) -> Option<String> {
    let clauses: Vec<String> = indexes(opts)
        .iter()
        .filter(|i| i.since == version)
        .map(|i| {
            format!(
                "    ADD {}",
                render_index(i).replacen("INDEX", "INDEX IF NOT EXISTS", 1)
            )
        })
        .collect();
    (!clauses.is_empty()).then(|| {
        format!(
            "ALTER TABLE {}{}\n{}",
            qualified(opts, &opts.table),
            on_cluster(opts),
            clauses.join(",\n")
        )
    })
}

/// `ALTER TABLE … ADD COLUMN IF NOT EXISTS …` for the columns `version` adds (each
/// placed after its predecessor in the model), or `None`. Nested fields are added as
/// their flattened `Parent.field Array(…)` columns, which ClickHouse groups by name.
pub fn add_columns(opts: &TableOptions, version: u32) -> Option<String> {
    let all = columns(opts);
    let clauses: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, c)| c.since == version)
        .map(|(i, c)| {
            let mut s = format!(
                "    ADD COLUMN IF NOT EXISTS {} {}",
                quote_ident(c.name()),
                c.ch_type
            );
            if !c.codec.is_default() {
                write!(s, " CODEC({})", c.codec).unwrap();
            }
            match i.checked_sub(1) {
                Some(prev) => write!(s, " AFTER {}", quote_ident(all[prev].name())).unwrap(),
                None => s.push_str(" FIRST"),
            }
            s
        })
        .collect();
    (!clauses.is_empty()).then(|| {
        format!(
            "ALTER TABLE {}{}\n{}",
            qualified(opts, &opts.table),
            on_cluster(opts),
            clauses.join(",\n")
        )
    })
}

/// Sets `non_replicated_deduplication_window` on a plain MergeTree traces table and
/// its lookup table, so retried inserts carrying the same `insert_deduplication_token`
/// are dropped, including on tables adopted from the exporter, which lack it. Changes
/// metadata only. `None` for replicated tables (deduplicated by default) and `Null`.
pub fn enable_insert_deduplication(opts: &TableOptions) -> Result<Option<Vec<String>>, Error> {
    if opts.engine != Engine::MergeTree {
        return Ok(None);
    }
    let set = |t: &Ident| {
        format!(
            "ALTER TABLE {} MODIFY SETTING non_replicated_deduplication_window = {}",
            qualified(opts, t),
            opts.dedup_window
        )
    };
    Ok(Some(vec![set(&opts.table), set(&opts.lookup_table()?)]))
}

/// The ClickHouse input format of the collector's inserts: the one definition, spelled
/// `auto` / `native` / `row_binary` in the collector's configuration, the `TracePipeline`
/// resource and flags.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "clap", value(rename_all = "snake_case"))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum InsertFormat {
    /// The measured best for the table variant (see the collector README).
    #[default]
    Auto,
    /// ClickHouse `Native`: column blocks (Map attributes only).
    Native,
    /// ClickHouse `RowBinary`: row after row (both attribute layouts).
    RowBinary,
}

impl InsertFormat {
    /// The format actually sent to a table with `attributes`: [`Self::Auto`] becomes the
    /// measured best (Native for Map attributes, RowBinary for JSON ones, which the Native
    /// encoder cannot write); an explicit choice stays. Never returns `Auto`.
    pub fn resolve(self, attributes: Attributes) -> Self {
        match (self, attributes) {
            (Self::Auto, Attributes::Map) => Self::Native,
            (Self::Auto, Attributes::Json) => Self::RowBinary,
            (chosen, _) => chosen,
        }
    }

    /// ClickHouse's name of the format sent to a table with `attributes` (`Native`,
    /// `RowBinary`).
    pub fn clickhouse_name(self, attributes: Attributes) -> &'static str {
        match self.resolve(attributes) {
            Self::Native => "Native",
            // `resolve` never returns `Auto`.
            Self::RowBinary | Self::Auto => "RowBinary",
        }
    }
}

/// `INSERT INTO db.table (cols…)` with [`model::insert_columns`] in order: the statement
/// without its `FORMAT` clause, for inserts in a format of the caller's choosing.
pub fn insert_into(opts: &TableOptions) -> String {
    let cols: Vec<String> = model::insert_columns(opts)
        .iter()
        .map(|c| quote_ident(c.name()))
        .collect();
    format!(
        "INSERT INTO {} ({})",
        qualified(opts, &opts.table),
        cols.join(", ")
    )
}

/// `INSERT INTO db.table (cols…) FORMAT <format>` ([`insert_into`] with `format`
/// resolved for the table): the statement the collector's sink sends with the encoded
/// rows.
pub fn insert_sql(opts: &TableOptions, format: InsertFormat) -> String {
    format!(
        "{} FORMAT {}",
        insert_into(opts),
        format.clickhouse_name(opts.attributes)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::{LATEST_VERSION, V_CREATE_TRACES_TABLE, V_SPAN_NAME_INDEX};
    use crate::model::{Attributes, Replication, Ttl};
    use crate::types::ClickHouseType;

    fn opts() -> TableOptions {
        TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        )
    }

    /// Reads the column list back out of a rendered `CREATE TABLE`, independently of
    /// the renderer: split the body at top-level commas, expand `Nested (…)` into
    /// `Parent.field Array(type)`, drop `INDEX` lines and codecs.
    fn parse_create_columns(sql: &str) -> Vec<(String, ClickHouseType, String)> {
        let open = sql.find("\n(\n").expect("column list") + 1;
        let mut depth = 0;
        let mut end = open;
        for (i, c) in sql[open..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &sql[open + 1..end];
        let mut out = Vec::new();
        for item in split_top_level(body) {
            let item = item.trim();
            if item.starts_with("INDEX ") {
                continue;
            }
            let (name, rest) = split_name(item);
            if let Some(inner) = rest.strip_prefix("Nested (") {
                // The `)` that closes `Nested (`, not the codec's.
                let mut depth = 0;
                let close = inner
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += match c {
                            '(' => 1,
                            ')' => -1,
                            _ => 0,
                        };
                        depth < 0
                    })
                    .unwrap()
                    .0;
                let codec = codec_of(&inner[close + 1..]);
                for field in split_top_level(&inner[..close]) {
                    let (f, ty) = split_name(field.trim());
                    let ty: ClickHouseType = ty.trim().parse().unwrap();
                    out.push((
                        format!("{name}.{f}"),
                        ClickHouseType::array(ty),
                        codec.clone(),
                    ));
                }
            } else {
                let (ty, codec) = match rest.find(" CODEC(") {
                    Some(i) => (&rest[..i], codec_of(&rest[i..])),
                    None => (rest, String::new()),
                };
                out.push((name, ty.trim().parse().unwrap(), codec));
            }
        }
        out
    }

    fn split_name(item: &str) -> (String, &str) {
        let rest = item.strip_prefix('`').expect("quoted name");
        let close = rest.find('`').unwrap();
        (rest[..close].to_string(), rest[close + 1..].trim())
    }

    fn codec_of(s: &str) -> String {
        let s = s.trim();
        s.strip_prefix("CODEC(")
            .and_then(|s| s.strip_suffix(')'))
            .unwrap_or("")
            .to_string()
    }

    fn split_top_level(s: &str) -> Vec<&str> {
        let (mut depth, mut start, mut out) = (0, 0, Vec::new());
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(&s[start..]);
        out
    }

    fn variants() -> Vec<TableOptions> {
        let mut out = Vec::new();
        for attributes in [Attributes::Map, Attributes::Json] {
            for keys in [false, true] {
                for engine in [
                    Engine::MergeTree,
                    Engine::Null,
                    Engine::Replicated(Replication::new(Ident::new("cluster", "c1").unwrap())),
                ] {
                    let mut o = opts();
                    o.attributes = attributes;
                    o.attribute_keys_columns = keys;
                    o.engine = engine;
                    out.push(o);
                }
            }
        }
        out
    }

    #[test]
    fn create_table_declares_exactly_the_insert_columns_in_order() {
        for o in variants() {
            let sql = create_traces_table(&o, LATEST_VERSION);
            let parsed = parse_create_columns(&sql);
            let model: Vec<_> = model::insert_columns(&o)
                .into_iter()
                .map(|c| (c.name().to_string(), c.ch_type, c.codec.to_string()))
                .collect();
            assert_eq!(parsed, model, "{o:?}\n{sql}");
        }
    }

    #[test]
    fn map_variant_matches_the_exporter_layout() {
        let mut o = opts();
        o.ttl = Some(Ttl::days(30).unwrap());
        let sql = create_traces_table(&o, V_CREATE_TRACES_TABLE);
        for part in [
            "CREATE TABLE `otel`.`otel_traces`\n(",
            "`Timestamp` DateTime64(9) CODEC(Delta(8), ZSTD(1))",
            "`ResourceAttributes` Map(LowCardinality(String), String) CODEC(ZSTD(1))",
            "`Events` Nested (\n        `Timestamp` DateTime64(9),\n        `Name` LowCardinality(String),\n        `Attributes` Map(LowCardinality(String), String)\n    ) CODEC(ZSTD(1))",
            "INDEX `idx_trace_id` TraceId TYPE bloom_filter(0.001) GRANULARITY 1",
            "INDEX `idx_res_attr_value` mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1",
            "INDEX `idx_duration` Duration TYPE minmax GRANULARITY 1",
            "ENGINE = MergeTree\nPARTITION BY toDate(Timestamp)\nORDER BY (ServiceName, SpanName, toDateTime(Timestamp))\nTTL toDateTime(Timestamp) + toIntervalDay(30)\nSETTINGS index_granularity = 8192, ttl_only_drop_parts = 1",
        ] {
            assert!(sql.contains(part), "missing {part:?} in\n{sql}");
        }
        // v1 is the exporter's table: the later index is not there yet.
        assert!(!sql.contains("idx_lower_span_name"));
        assert!(create_traces_table(&o, V_SPAN_NAME_INDEX).contains("idx_lower_span_name"));
    }

    #[test]
    fn json_variant_has_keys_indexes_no_trace_id_index_and_timestamp_in_order_by() {
        let mut o = opts();
        o.attributes = Attributes::Json;
        let sql = create_traces_table(&o, V_CREATE_TRACES_TABLE);
        assert!(sql.contains("`SpanAttributes` JSON CODEC(ZSTD(1))"));
        assert!(
            sql.contains("INDEX `idx_span_attr_keys` SpanAttributesKeys TYPE bloom_filter(0.01)")
        );
        assert!(!sql.contains("idx_trace_id"));
        assert!(sql.contains("ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)"));
    }

    #[test]
    fn null_engine_has_no_storage_clauses() {
        let mut o = opts();
        o.engine = Engine::Null;
        o.ttl = Some(Ttl::days(3).unwrap());
        let sql = create_traces_table(&o, LATEST_VERSION);
        assert!(sql.ends_with(")\nENGINE = Null"), "{sql}");
        for absent in ["PARTITION", "ORDER BY", "INDEX", "CODEC", "TTL", "SETTINGS"] {
            assert!(!sql.contains(absent), "{absent} in {sql}");
        }
        assert_eq!(add_indexes(&o, V_SPAN_NAME_INDEX), None);
        assert_eq!(enable_insert_deduplication(&o).unwrap(), None);
    }

    #[test]
    fn replicated_renders_on_cluster_everywhere_with_escaped_paths() {
        let mut o = opts();
        let mut r = Replication::new(Ident::new("cluster", "prod`x").unwrap());
        r.zk_path = "/ch/{shard}/it's".into();
        o.engine = Engine::Replicated(r);
        assert_eq!(
            create_database(&o),
            r"CREATE DATABASE IF NOT EXISTS `otel` ON CLUSTER `prod\`x`"
        );
        let t = create_traces_table(&o, LATEST_VERSION);
        assert!(t.starts_with(r"CREATE TABLE `otel`.`otel_traces` ON CLUSTER `prod\`x`"));
        assert!(t.contains(r"ENGINE = ReplicatedMergeTree('/ch/{shard}/it\'s', '{replica}')"));
        let l = create_lookup_table(&o).unwrap();
        assert!(l.contains("ON CLUSTER") && l.contains("ReplicatedMergeTree("));
        assert!(
            create_lookup_view(&o)
                .unwrap()
                .contains(r"ON CLUSTER `prod\`x` TO ")
        );
        assert!(
            add_indexes(&o, V_SPAN_NAME_INDEX)
                .unwrap()
                .contains("ON CLUSTER")
        );
        // Replicated tables deduplicate by default; no setting to add.
        assert_eq!(enable_insert_deduplication(&o).unwrap(), None);
    }

    #[test]
    fn lookup_table_and_view_match_the_exporter() {
        let mut o = opts();
        o.ttl = Some("12h".parse().unwrap());
        let t = create_lookup_table(&o).unwrap();
        assert!(t.starts_with("CREATE TABLE `otel`.`otel_traces_trace_id_ts`\n("));
        assert!(t.contains("`Start` DateTime CODEC(Delta(4), ZSTD(1))"));
        assert!(t.contains("PARTITION BY toDate(Start)\nORDER BY (TraceId, Start)\nTTL toDateTime(Start) + toIntervalHour(12)"));
        let v = create_lookup_view(&o).unwrap();
        assert_eq!(
            v,
            "CREATE MATERIALIZED VIEW `otel`.`otel_traces_trace_id_ts_mv` TO `otel`.`otel_traces_trace_id_ts`\nAS SELECT\n    TraceId,\n    min(Timestamp) AS Start,\n    max(Timestamp) AS End\nFROM `otel`.`otel_traces`\nWHERE TraceId != ''\nGROUP BY TraceId"
        );
    }

    #[test]
    fn add_indexes_is_idempotent_sql_and_dedup_touches_both_tables() {
        let o = opts();
        assert_eq!(
            add_indexes(&o, V_SPAN_NAME_INDEX).unwrap(),
            "ALTER TABLE `otel`.`otel_traces`\n    ADD INDEX IF NOT EXISTS `idx_lower_span_name` lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8"
        );
        assert_eq!(add_columns(&o, V_SPAN_NAME_INDEX), None);
        assert_eq!(
            enable_insert_deduplication(&o).unwrap().unwrap(),
            vec![
                "ALTER TABLE `otel`.`otel_traces` MODIFY SETTING non_replicated_deduplication_window = 1000",
                "ALTER TABLE `otel`.`otel_traces_trace_id_ts` MODIFY SETTING non_replicated_deduplication_window = 1000",
            ]
        );
    }

    #[test]
    fn insert_sql_lists_the_insert_columns_quoted() {
        let sql = insert_sql(&opts(), InsertFormat::Native);
        assert!(sql.starts_with("INSERT INTO `otel`.`otel_traces` (`Timestamp`, `TraceId`, "));
        assert!(sql.contains("`Events.Timestamp`, `Events.Name`"));
        assert!(sql.ends_with("`Links.Attributes`) FORMAT Native"));
        assert_eq!(sql.matches('`').count(), 2 * (22 + 2));
    }

    #[test]
    fn auto_insert_format_is_native_for_map_and_row_binary_for_json() {
        let mut o = opts();
        assert!(insert_sql(&o, InsertFormat::Auto).ends_with(") FORMAT Native"));
        assert!(insert_sql(&o, InsertFormat::RowBinary).ends_with(") FORMAT RowBinary"));
        o.attributes = Attributes::Json;
        assert!(insert_sql(&o, InsertFormat::Auto).ends_with(") FORMAT RowBinary"));
        assert!(insert_sql(&o, InsertFormat::Native).ends_with(") FORMAT Native"));
        for format in [
            InsertFormat::Auto,
            InsertFormat::Native,
            InsertFormat::RowBinary,
        ] {
            for attributes in [Attributes::Map, Attributes::Json] {
                assert_ne!(format.resolve(attributes), InsertFormat::Auto);
            }
        }
    }

    #[test]
    fn hostile_names_stay_inside_their_quotes_in_every_statement() {
        let mut o = opts();
        o.database = Ident::new("database", "d`; DROP DATABASE x; --").unwrap();
        o.table = Ident::new("table", "t` (a String) ENGINE=Log; --").unwrap();
        let statements = [
            create_database(&o),
            create_traces_table(&o, LATEST_VERSION),
            create_lookup_table(&o).unwrap(),
            create_lookup_view(&o).unwrap(),
            add_indexes(&o, V_SPAN_NAME_INDEX).unwrap(),
            insert_sql(&o, InsertFormat::RowBinary),
        ];
        for sql in statements {
            // Every backtick that is not escaped opens or closes an identifier; the
            // hostile text only ever appears between an opening and a closing one.
            assert!(sql.contains(r"`d\`; DROP DATABASE x; --`"), "{sql}");
            assert!(!sql.contains("d`; DROP"), "{sql}");
            let unescaped = sql.replace(r"\\", "").replace(r"\`", "");
            assert_eq!(unescaped.matches('`').count() % 2, 0, "{sql}");
        }
    }
}
