//! The traces table's options for the schema crate, from `spec.clickhouse`: what the
//! operator's migrations create.

use tracehouse_schema::{Engine, Ident, Replication, TableOptions, Ttl};

use super::{BuildError, invalid};
use crate::crd::{self, EngineKind};

/// The table the migrations create, from the spec's ClickHouse section.
pub fn table_options(spec: &crd::ClickHouseSpec) -> Result<TableOptions, BuildError> {
    let database = Ident::new("database", spec.database.as_str())
        .map_err(|e| invalid("spec.clickhouse.database", e))?;
    let table = Ident::new("table", spec.table.as_str())
        .map_err(|e| invalid("spec.clickhouse.table", e))?;
    let s = &spec.schema;
    let mut opts = TableOptions::new(database, table);
    opts.attributes = match s.attributes {
        crd::Attributes::Map => tracehouse_schema::Attributes::Map,
        crd::Attributes::Json => tracehouse_schema::Attributes::Json,
    };
    opts.attribute_keys_columns = s.attribute_keys_columns;
    opts.engine = match s.engine {
        EngineKind::MergeTree => Engine::MergeTree,
        EngineKind::Null => Engine::Null,
        EngineKind::ReplicatedMergeTree => {
            let cluster = s.cluster.as_deref().ok_or_else(|| {
                invalid(
                    "spec.clickhouse.schema.cluster",
                    "required when engine is ReplicatedMergeTree",
                )
            })?;
            Engine::Replicated(Replication::new(
                Ident::new("cluster", cluster)
                    .map_err(|e| invalid("spec.clickhouse.schema.cluster", e))?,
            ))
        }
    };
    opts.ttl = s
        .ttl
        .as_deref()
        .map(str::parse::<Ttl>)
        .transpose()
        .map_err(|e| invalid("spec.clickhouse.schema.ttl", e))?;
    opts.dedup_window = u64::try_from(s.dedup_window)
        .map_err(|_| invalid("spec.clickhouse.schema.dedupWindow", "must not be negative"))?;
    opts.validate()
        .map_err(|e| invalid("spec.clickhouse.table", e))?;
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::sample;
    use super::*;

    #[test]
    fn table_options_follow_the_schema_spec() {
        let mut tp = sample();
        tp.spec.clickhouse.schema.attributes = crd::Attributes::Json;
        tp.spec.clickhouse.schema.ttl = Some("30d".into());
        let o = table_options(&tp.spec.clickhouse).unwrap();
        assert_eq!(o.attributes, tracehouse_schema::Attributes::Json);
        assert_eq!(o.ttl.unwrap().to_string(), "30d");
        tp.spec.clickhouse.schema.engine = EngineKind::ReplicatedMergeTree;
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.cluster"), "{err}");
        tp.spec.clickhouse.schema.ttl = Some("3 weeks".into());
        tp.spec.clickhouse.schema.cluster = Some("main".into());
        let err = table_options(&tp.spec.clickhouse).unwrap_err().to_string();
        assert!(err.contains("spec.clickhouse.schema.ttl"), "{err}");
    }
}
