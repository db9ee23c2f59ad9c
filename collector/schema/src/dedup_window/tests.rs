//! Tests of the window arithmetic and statements, over recorded `system.*` rows.

use super::*;
use crate::model::Replication;

fn opts() -> TableOptions {
    crate::model::default_options()
}

#[test]
fn the_window_grows_with_partitions_and_the_horizon_and_shrinks_with_linger() {
    let at = |p: u64, linger_ms: u64| {
        PipelineShape::new(p, Duration::from_millis(linger_ms)).required_window()
    };
    // The figures the module header quotes.
    assert_eq!(at(1, 1_000), 360);
    assert_eq!(at(8, 1_000), 2_880);
    assert_eq!(at(128, 1_000), 46_080);
    // Issue 30's case: 128 partitions at the old fixed 1 000 was 46× too small.
    assert!(at(128, 1_000) > 46 * 1_000);
    assert_eq!(
        at(8, 100),
        28_800,
        "ten times the blocks at a tenth of the linger"
    );
    assert_eq!(at(8, 7_000), 8 * 4 * 13, "ceil(90 / 7) lingers");
    let mut long = PipelineShape::new(8, Duration::from_secs(1));
    long.retry_horizon = Duration::from_secs(270);
    assert_eq!(long.required_window(), 8 * 4 * 300);
}

#[test]
fn the_window_is_bounded_and_never_zero() {
    assert_eq!(
        PipelineShape::new(100_000, Duration::ZERO).required_window(),
        MAX_WINDOW
    );
    assert_eq!(
        PipelineShape::new(0, Duration::from_secs(1)).required_window(),
        360
    );
    let mut no_safety = PipelineShape::new(1, Duration::from_secs(3_600));
    no_safety.safety = 0;
    assert_eq!(no_safety.required_window(), 2);
}

#[test]
fn a_requested_window_is_a_floor_and_zero_turns_deduplication_off() {
    assert_eq!(effective_window(1_000, 46_080), 46_080);
    assert_eq!(effective_window(100_000, 46_080), 100_000);
    assert_eq!(effective_window(0, 46_080), 0);
    assert_eq!(effective_window(5_000_000, 1), MAX_WINDOW);
}

#[test]
fn each_engine_names_its_own_setting_and_replicated_never_goes_below_the_default() {
    let mut o = opts();
    o.dedup_window = 2_880;
    assert_eq!(
        desired_setting(&o),
        Some(WindowSetting {
            name: NON_REPLICATED_SETTING,
            value: 2_880
        })
    );
    o.engine = Engine::Replicated(Replication {
        cluster: Ident::new("cluster", "c").unwrap(),
        zk_path: Replication::DEFAULT_ZK_PATH.into(),
        replica: Replication::DEFAULT_REPLICA.into(),
    });
    assert_eq!(
        desired_setting(&o).unwrap().value,
        REPLICATED_DEFAULT_WINDOW
    );
    o.dedup_window = 46_080;
    assert_eq!(desired_setting(&o).unwrap().name, REPLICATED_SETTING);
    assert_eq!(desired_setting(&o).unwrap().value, 46_080);
    o.engine = Engine::Null;
    assert_eq!(desired_setting(&o), None);
}

#[test]
fn settings_are_read_from_the_create_statement_with_engine_defaults() {
    let q = "CREATE TABLE otel.t (`a` UInt8) ENGINE = MergeTree ORDER BY a \
             SETTINGS index_granularity = 8192, non_replicated_deduplication_window = 1000";
    assert_eq!(setting_in(q, NON_REPLICATED_SETTING), Some(1000));
    assert_eq!(setting_in(q, "index_granularity"), Some(8192));
    assert_eq!(setting_in(q, REPLICATED_SETTING), None);
    let defaults = ServerDefaults::from_rows(ROWS_26_9);
    assert_eq!(
        current_value(REPLICATED_SETTING, q, &defaults),
        Some(REPLICATED_DEFAULT_WINDOW)
    );
    let bare = "CREATE TABLE otel.t (`a` UInt8) ENGINE = MergeTree ORDER BY a";
    assert_eq!(
        current_value(NON_REPLICATED_SETTING, bare, &defaults),
        Some(0)
    );
    assert_eq!(
        current_value(NON_REPLICATED_SETTING, bare, &ServerDefaults::default()),
        None
    );
}

#[test]
fn only_tables_whose_window_is_smaller_are_altered() {
    let o = opts();
    let want = WindowSetting {
        name: NON_REPLICATED_SETTING,
        value: 2_880,
    };
    let t = |name: &str, window: u64| {
        (
            Ident::new("table", name).unwrap(),
            format!(
                "CREATE TABLE x ENGINE = MergeTree ORDER BY a SETTINGS index_granularity = 8192, non_replicated_deduplication_window = {window}"
            ),
        )
    };
    assert_eq!(
        change_statements(&o, std::slice::from_ref(&want), &[t("otel_traces", 1_000), t("lookup", 2_880)], &ServerDefaults::from_rows(ROWS_26_9)),
        vec![
            "ALTER TABLE `otel`.`otel_traces` MODIFY SETTING non_replicated_deduplication_window = 2880"
                .to_string()
        ]
    );
    assert!(
        change_statements(
            &o,
            std::slice::from_ref(&want),
            &[t("otel_traces", 2_880)],
            &ServerDefaults::from_rows(ROWS_26_9)
        )
        .is_empty()
    );
    // Never lowered: another pipeline (or the CLI's default) asking for less.
    assert!(
        change_statements(
            &o,
            std::slice::from_ref(&want),
            &[t("otel_traces", 46_080)],
            &ServerDefaults::from_rows(ROWS_26_9)
        )
        .is_empty()
    );
    let off = WindowSetting {
        name: NON_REPLICATED_SETTING,
        value: 0,
    };
    assert!(
        change_statements(
            &o,
            &[off],
            &[t("otel_traces", 1_000)],
            &ServerDefaults::from_rows(ROWS_26_9)
        )
        .is_empty()
    );
}

#[test]
fn keeper_kept_windows_are_told_by_the_engine_the_server_names() {
    assert!(!keeps_ids_in_keeper("MergeTree"));
    assert!(keeps_ids_in_keeper("ReplicatedMergeTree"));
    assert!(keeps_ids_in_keeper("SharedMergeTree"));
    assert!(keeps_ids_in_keeper("ReplicatedReplacingMergeTree"));
    assert_eq!(
        PipelineShape::new(8, Duration::from_secs(1)).required_seconds(),
        180
    );
}

/// `system.merge_tree_settings` as this stack's engine (26.9) answers
/// `SELECT name, value … WHERE name LIKE '%deduplication_window%'` — recorded here.
const ROWS_26_9: [(&str, &str); 3] = [
    ("non_replicated_deduplication_window", "0"),
    ("replicated_deduplication_window", "10000"),
    ("replicated_deduplication_window_seconds", "3600"),
];
/// The same on a 25.3 LTS server, transcribed from ClickHouse's settings changes
/// history (count 1 000 before 25.9, seconds 604 800 before 25.10): not run here.
const ROWS_25_3: [(&str, &str); 3] = [
    ("non_replicated_deduplication_window", "0"),
    ("replicated_deduplication_window", "1000"),
    ("replicated_deduplication_window_seconds", "604800"),
];

fn replicated() -> TableOptions {
    let mut o = opts();
    o.engine = Engine::Replicated(Replication {
        cluster: Ident::new("cluster", "c").unwrap(),
        zk_path: Replication::DEFAULT_ZK_PATH.into(),
        replica: Replication::DEFAULT_REPLICA.into(),
    });
    o.dedup_window = 46_080;
    o
}

#[test]
fn a_replicated_table_on_25_3_gets_both_bounds_raised_in_one_statement() {
    // The table sets neither: before, 10 000 was assumed and nothing was raised.
    let o = replicated();
    let create = "CREATE TABLE otel.otel_traces (`a` UInt8) ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/otel/otel_traces', '{replica}') ORDER BY a SETTINGS index_granularity = 8192";
    let want = desired_settings(&o, Some("ReplicatedMergeTree"), 180);
    let tables = [(
        Ident::new("table", "otel_traces").unwrap(),
        create.to_string(),
    )];
    let defaults = ServerDefaults::from_rows(ROWS_25_3);
    assert_eq!(
        change_statements(&o, &want, &tables, &defaults),
        vec![
            "ALTER TABLE `otel`.`otel_traces` ON CLUSTER `c` MODIFY SETTING replicated_deduplication_window = 46080"
                .to_string()
        ],
        "the seconds (a week) already hold"
    );
    // On 26.9 the count default is 10 000 and the seconds 3 600: only the count.
    let defaults = ServerDefaults::from_rows(ROWS_26_9);
    assert_eq!(change_statements(&o, &want, &tables, &defaults).len(), 1);
    // A table someone set to 60 s gets the time bound raised too.
    let short = format!("{create}, replicated_deduplication_window_seconds = 60");
    let tables = [(Ident::new("table", "otel_traces").unwrap(), short)];
    assert_eq!(
        change_statements(&o, &want, &tables, &defaults),
        vec![
            "ALTER TABLE `otel`.`otel_traces` ON CLUSTER `c` MODIFY SETTING replicated_deduplication_window = 46080, replicated_deduplication_window_seconds = 180"
                .to_string()
        ]
    );
}

#[test]
fn cloud_s_shared_merge_tree_is_sized_as_replicated_not_with_the_plain_setting() {
    // Asked for a MergeTree, ClickHouse Cloud made a SharedMergeTree: system.tables says so.
    let mut o = opts();
    o.dedup_window = 2_880;
    let create = "CREATE TABLE otel.otel_traces (`a` UInt8) ENGINE = SharedMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}') ORDER BY a SETTINGS index_granularity = 8192, non_replicated_deduplication_window = 2880";
    let want = desired_settings(&o, Some("SharedMergeTree"), 180);
    assert_eq!(
        want.iter().map(|w| w.name).collect::<Vec<_>>(),
        [REPLICATED_SETTING, REPLICATED_SECONDS_SETTING]
    );
    let tables = [(
        Ident::new("table", "otel_traces").unwrap(),
        create.to_string(),
    )];
    // Unknown server defaults (the read failed): both are set, never assumed.
    assert_eq!(
        change_statements(&o, &want, &tables, &ServerDefaults::default()),
        vec![
            "ALTER TABLE `otel`.`otel_traces` MODIFY SETTING replicated_deduplication_window = 10000, replicated_deduplication_window_seconds = 180"
                .to_string()
        ]
    );
    assert_eq!(engine_in(create), Some("SharedMergeTree"));
    assert_eq!(
        engine_in("CREATE TABLE a.b (x UInt8) ENGINE = MergeTree ORDER BY x"),
        Some("MergeTree")
    );
    // The plain MergeTree here keeps its own setting.
    let plain = desired_settings(&o, Some("MergeTree"), 180);
    assert_eq!(
        plain,
        vec![WindowSetting {
            name: NON_REPLICATED_SETTING,
            value: 2_880
        }]
    );
    assert!(
        change_statements(&o, &plain, &tables, &ServerDefaults::from_rows(ROWS_26_9)).is_empty()
    );
}

#[test]
fn window_values_are_blanked_for_comparing_migration_texts() {
    let a = "ALTER TABLE `d`.`t` MODIFY SETTING non_replicated_deduplication_window = 1000;\n\
             ALTER TABLE `d`.`l` MODIFY SETTING non_replicated_deduplication_window = 1000";
    let b = a.replace("1000", "46080");
    assert_eq!(without_window_values(a), without_window_values(&b));
    assert!(without_window_values(a).ends_with("deduplication_window = N"));
    assert_ne!(
        without_window_values(a),
        without_window_values(&a.replace("`t`", "`u`"))
    );
}
