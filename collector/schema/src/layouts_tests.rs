//! The pure parts of the opt-in layouts: rendering, the append-only list's rules for opt-in
//! migrations, the state decision and the server-version gate.

use super::*;
use crate::migrations::{MIGRATIONS, render_all, script};
use crate::model::{self, Engine, Layouts};

/// Default options with the layouts asked for (the status tests use it too).
pub(crate) fn with(attribute_items: bool, buckets: bool) -> TableOptions {
    let mut o = model::default_options();
    o.layouts = Layouts {
        attribute_items,
        map_serialization: if buckets {
            MapSerialization::Buckets
        } else {
            MapSerialization::Default
        },
    };
    o
}

#[test]
fn the_opt_in_migrations_are_numbered_like_any_other() {
    let opt_in: Vec<_> = MIGRATIONS
        .iter()
        .filter_map(|m| m.opt_in().map(|l| (m.version, m.name, l)))
        .collect();
    assert_eq!(
        opt_in,
        vec![
            (6, "add_attribute_items", Layout::AttributeItems),
            (7, "bucketed_map_serialization", Layout::MapBuckets),
        ]
    );
    for l in Layout::ALL {
        assert_eq!(MIGRATIONS[l.version() as usize - 1].opt_in(), Some(l));
    }
}

#[test]
fn attribute_items_render_pr50878s_columns_and_text_indexes() {
    let r = render_all(&with(true, false)).unwrap();
    let items = &r[5];
    assert!(items.opt_in.unwrap().wanted);
    assert_eq!(
        items.statements,
        vec![
            "ALTER TABLE `otel`.`otel_traces`\n    ADD COLUMN IF NOT EXISTS `ResourceAttributeItems` Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(ResourceAttributes, 'Array(Tuple(String, String))')),\n    ADD COLUMN IF NOT EXISTS `SpanAttributeItems` Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2), CAST(SpanAttributes, 'Array(Tuple(String, String))'))".to_string(),
            "ALTER TABLE `otel`.`otel_traces`\n    ADD INDEX IF NOT EXISTS `idx_res_attr_items` ResourceAttributeItems TYPE text(tokenizer = 'array') GRANULARITY 1,\n    ADD INDEX IF NOT EXISTS `idx_span_attr_items` SpanAttributeItems TYPE text(tokenizer = 'array') GRANULARITY 1".to_string(),
            "ALTER TABLE `otel`.`otel_traces`\n    MATERIALIZE INDEX `idx_res_attr_items`,\n    MATERIALIZE INDEX `idx_span_attr_items` SETTINGS mutations_sync = 2".to_string(),
        ]
    );
    assert!(r[6].statements.is_empty(), "buckets not asked for");
    // The ALIAS expressions are PR #50878's, character for character.
    let fixture = include_str!("../tests/fixtures/pr50878_map.sql");
    for (name, expr) in alias_columns() {
        assert!(
            fixture.contains(&format!("{name} Array(String) ALIAS {expr},")),
            "{name}"
        );
    }
}

#[test]
fn buckets_render_the_measured_settings_on_the_traces_table_only() {
    let r = render_all(&with(false, true)).unwrap();
    assert!(r[5].statements.is_empty());
    assert_eq!(
        r[6].statements,
        vec![
            "ALTER TABLE `otel`.`otel_traces`\nMODIFY SETTING map_serialization_version = 'with_buckets', map_buckets_strategy = 'linear', map_buckets_min_avg_size = 0"
        ]
    );
}

#[test]
fn layouts_never_change_the_text_of_the_migrations_every_table_runs() {
    let plain = render_all(&with(false, false)).unwrap();
    let both = render_all(&with(true, true)).unwrap();
    for (a, b) in plain.iter().zip(&both).take(5) {
        assert_eq!(a.checksum, b.checksum, "{:04} {}", a.version, a.name);
    }
    assert!(plain[5..].iter().all(|m| m.statements.is_empty()));
    assert!(
        plain[5..]
            .iter()
            .all(|m| m.opt_in.is_some_and(|o| !o.wanted))
    );
    let printed = script(&with(false, false)).unwrap();
    assert!(
        printed
            .contains("-- 0006 add_attribute_items (opt-in layout attribute_items: not asked for)"),
        "{printed}"
    );
    // Nothing destructive with the layouts either (the list-wide scan covers default
    // options); the one mutation is migration 6's MATERIALIZE INDEX (`Layout::render` says
    // why).
    let all = script(&with(true, true)).unwrap().to_uppercase();
    for word in [
        " DROP ",
        "TRUNCATE",
        " DELETE",
        "MATERIALIZE COLUMN",
        "MODIFY COLUMN",
    ] {
        assert!(!all.contains(word), "{word}");
    }
    assert_eq!(all.matches("MATERIALIZE INDEX").count(), 2);
    assert!(
        plain
            .iter()
            .chain(&both)
            .filter(|m| m.version != Layout::AttributeItems.version())
            .all(|m| !m.statements.join(" ").contains("MATERIALIZE INDEX"))
    );
}

#[test]
fn the_gate_names_the_option_and_the_versions() {
    assert_eq!(ServerVersion::parse("26.9.2.1"), Some(ServerVersion(26, 9)));
    assert_eq!(
        ServerVersion::parse("26.3.1.896-lts"),
        Some(ServerVersion(26, 3))
    );
    assert_eq!(ServerVersion::parse("25.10"), Some(ServerVersion(25, 10)));
    assert_eq!(ServerVersion::parse("garbage"), None);
    assert!(gate(&with(true, true), "26.9.2.1").is_ok());
    assert!(gate(&with(false, true), "26.3.1.1").is_ok());
    assert!(
        gate(&with(false, false), "23.8.1.1").is_ok(),
        "nothing asked"
    );
    let err = gate(&with(false, true), "26.2.4.1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("map_serialization=Buckets needs ClickHouse 26.3 or newer")
            && err.contains("server of version 26.2.4.1")
            && err.contains("nothing was changed"),
        "{err}"
    );
    let err = gate(&with(true, false), "25.12.1.1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attribute_items needs ClickHouse 26.2 or newer")
            && err.contains("enable_full_text_index"),
        "{err}"
    );
    assert!(
        gate(&with(true, false), "").is_err(),
        "unknown version refused"
    );
    // 25.10 < 26.2: numeric, not lexical.
    assert!(gate(&with(true, false), "25.10.1.1").is_err());
}

#[test]
fn layouts_are_for_stored_map_tables() {
    let mut json = with(true, false);
    json.attributes = Attributes::Json;
    let e = check_options(&json).unwrap_err().to_string();
    assert!(e.contains("attribute_items is for Map attributes"), "{e}");
    let mut null = with(false, true);
    null.engine = Engine::Null;
    let e = check_options(&null).unwrap_err().to_string();
    assert!(
        e.contains("map_serialization=Buckets needs a stored table"),
        "{e}"
    );
    assert_eq!(
        label(&wanted(&with(true, true))),
        "attributeItems,mapSerialization=Buckets"
    );
    assert_eq!(label(&[]), "none");
}

#[test]
fn replicated_tables_take_the_layouts_on_the_cluster() {
    let mut o = with(true, true);
    o.engine = Engine::Replicated(crate::model::Replication::new(
        crate::Ident::new("cluster", "main").unwrap(),
    ));
    let r = render_all(&o).unwrap();
    let statements: Vec<&String> = r[5..].iter().flat_map(|m| &m.statements).collect();
    assert_eq!(statements.len(), 4);
    for s in statements {
        assert!(
            s.starts_with("ALTER TABLE `otel`.`otel_traces` ON CLUSTER `main`\n"),
            "{s}"
        );
    }
}
