//! The traces table's options for the schema crate, from `spec.clickhouse`: what the
//! operator's migrations create.

use tracehouse_schema::{Setting, SettingError, TableOptions, TableSettings};

use super::{BuildError, invalid};
use crate::crd;

/// The table the migrations create, from the spec's ClickHouse section.
pub fn table_options(spec: &crd::ClickHouseSpec) -> Result<TableOptions, BuildError> {
    let s = &spec.schema;
    let settings = TableSettings {
        attributes: s.attributes,
        attribute_keys_columns: s.attribute_keys_columns,
        engine: s.engine,
        cluster: s.cluster.as_deref(),
        ttl: s.ttl.as_deref(),
        dedup_window: u64::try_from(s.dedup_window)
            .map_err(|_| invalid("spec.clickhouse.schema.dedupWindow", "must not be negative"))?,
        layouts: s.layouts,
        ..TableSettings::new(&spec.database, &spec.table)
    };
    TableOptions::try_from(&settings).map_err(|e| match e {
        SettingError::ClusterRequired => invalid(
            "spec.clickhouse.schema.cluster",
            "required when engine is ReplicatedMergeTree",
        ),
        SettingError::Invalid(setting, e) => invalid(
            match setting {
                Setting::Database => "spec.clickhouse.database",
                Setting::Table => "spec.clickhouse.table",
                Setting::Cluster => "spec.clickhouse.schema.cluster",
                Setting::Ttl => "spec.clickhouse.schema.ttl",
                Setting::Layouts => "spec.clickhouse.schema.layouts",
            },
            e,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::fixtures::sample;

    #[test]
    fn table_options_follow_the_schema_spec() {
        let mut tp = sample();
        tp.spec.clickhouse.schema.attributes = crd::Attributes::Json;
        tp.spec.clickhouse.schema.ttl = Some("30d".into());
        let o = table_options(&tp.spec.clickhouse).unwrap();
        assert_eq!(o.attributes, tracehouse_schema::Attributes::Json);
        assert_eq!(o.ttl.unwrap().to_string(), "30d");
        tp.spec.clickhouse.schema.engine = crd::EngineKind::ReplicatedMergeTree;
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.cluster"), "{err}");
        tp.spec.clickhouse.schema.ttl = Some("3 weeks".into());
        tp.spec.clickhouse.schema.cluster = Some("main".into());
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.ttl"), "{err}");
    }

    #[test]
    fn layouts_reach_the_options_and_are_refused_on_json() {
        let mut tp = sample();
        assert!(
            table_options(&tp.spec.clickhouse)
                .unwrap()
                .layouts
                .is_default()
        );
        tp.spec.clickhouse.schema.layouts = crd::Layouts {
            attribute_items: true,
            map_serialization: crd::MapSerialization::Buckets,
        };
        let o = table_options(&tp.spec.clickhouse).unwrap();
        assert!(o.layouts.attribute_items);
        assert_eq!(o.layouts.map_serialization, crd::MapSerialization::Buckets);
        tp.spec.clickhouse.schema.attributes = crd::Attributes::Json;
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.layouts"), "{err}");
    }
}
