//! Unit tests of `ddl.rs`.

use super::*;
use crate::model::{Attributes, Replication, Ttl};
use crate::types::ClickHouseType;
use crate::version::{LATEST_VERSION, V_CREATE_TRACES_TABLE, V_SPAN_NAME_INDEX};

fn opts() -> TableOptions {
    crate::model::default_options()
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
    assert!(sql.contains("INDEX `idx_span_attr_keys` SpanAttributesKeys TYPE bloom_filter(0.01)"));
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
