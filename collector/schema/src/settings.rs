//! The table's shape as users write it, and the one checked conversion into
//! [`TableOptions`].
//!
//! Three front ends name the table: the collector's `clickhouse` configuration, a
//! `TracePipeline`'s `spec.clickhouse`, and the `schema` command's flags. Each fills a
//! [`TableSettings`] from its own fields and maps a [`SettingError`] back to its own field
//! names, so the rules (names are identifiers, a replicated table needs a cluster, the
//! TTL syntax, the derived names fit) are written once, here.

use crate::error::Error;
use crate::ident::Ident;
use crate::model::{
    Attributes, DEFAULT_DEDUP_WINDOW, Engine, EngineKind, Layouts, Replication, TableOptions, Ttl,
};

/// The traces table's shape before it is checked: plain strings and choices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSettings<'a> {
    pub database: &'a str,
    pub table: &'a str,
    pub attributes: Attributes,
    /// See [`TableOptions::attribute_keys_columns`].
    pub attribute_keys_columns: bool,
    pub engine: EngineKind,
    /// The cluster of a `ReplicatedMergeTree` table (required there, unused otherwise).
    pub cluster: Option<&'a str>,
    /// Keeper path of a replicated table.
    pub zk_path: &'a str,
    /// Replica name of a replicated table.
    pub replica: &'a str,
    /// Retention: days (`30`) or a duration (`30d`, `72h`, `90m`, `3600s`); `None` keeps.
    pub ttl: Option<&'a str>,
    /// See [`TableOptions::dedup_window`].
    pub dedup_window: u64,
    /// See [`TableOptions::layouts`].
    pub layouts: Layouts,
}

impl<'a> TableSettings<'a> {
    /// `database.table` with the defaults of [`TableOptions::new`].
    pub fn new(database: &'a str, table: &'a str) -> Self {
        Self {
            database,
            table,
            attributes: Attributes::Map,
            attribute_keys_columns: true,
            engine: EngineKind::MergeTree,
            cluster: None,
            zk_path: Replication::DEFAULT_ZK_PATH,
            replica: Replication::DEFAULT_REPLICA,
            ttl: None,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            layouts: Layouts::default(),
        }
    }
}

/// The setting a [`SettingError::Invalid`] is about, for the front end to name its own
/// field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Database,
    /// The table name, or a name derived from it (lookup table and view) that does not fit.
    Table,
    Cluster,
    Ttl,
    /// An opt-in layout the attributes or the engine cannot take.
    Layouts,
}

/// Why [`TableSettings`] do not make a table.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    /// `ReplicatedMergeTree` without a cluster.
    #[error("a ReplicatedMergeTree table needs a cluster")]
    ClusterRequired,
    /// A setting's value is not valid.
    #[error("{1}")]
    Invalid(Setting, #[source] Error),
}

impl SettingError {
    /// The library error, for callers that report it as is.
    pub fn into_error(self) -> Error {
        match self {
            Self::ClusterRequired => Error::InvalidOptions(Self::ClusterRequired.to_string()),
            Self::Invalid(_, e) => e,
        }
    }
}

impl TryFrom<&TableSettings<'_>> for TableOptions {
    type Error = SettingError;

    fn try_from(s: &TableSettings<'_>) -> Result<Self, SettingError> {
        let invalid = |setting| move |e| SettingError::Invalid(setting, e);
        let mut o = TableOptions::new(
            Ident::new("database", s.database).map_err(invalid(Setting::Database))?,
            Ident::new("table", s.table).map_err(invalid(Setting::Table))?,
        );
        o.attributes = s.attributes;
        o.attribute_keys_columns = s.attribute_keys_columns;
        o.engine = match s.engine {
            EngineKind::MergeTree => Engine::MergeTree,
            EngineKind::Null => Engine::Null,
            EngineKind::ReplicatedMergeTree => {
                let cluster = s.cluster.ok_or(SettingError::ClusterRequired)?;
                Engine::Replicated(Replication {
                    cluster: Ident::new("cluster", cluster).map_err(invalid(Setting::Cluster))?,
                    zk_path: s.zk_path.to_owned(),
                    replica: s.replica.to_owned(),
                })
            }
        };
        o.ttl = s
            .ttl
            .map(str::parse::<Ttl>)
            .transpose()
            .map_err(invalid(Setting::Ttl))?;
        o.dedup_window = s.dedup_window;
        o.layouts = s.layouts;
        crate::layouts::check_options(&o).map_err(invalid(Setting::Layouts))?;
        o.validate().map_err(invalid(Setting::Table))?;
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddl::InsertFormat;

    fn options(s: &TableSettings<'_>) -> Result<TableOptions, SettingError> {
        TableOptions::try_from(s)
    }

    /// The spellings of the collector's config, the CRD and their defaults: changing one
    /// breaks every file users wrote.
    #[test]
    fn choices_keep_their_wire_spellings() {
        fn spelled(v: impl serde::Serialize) -> String {
            serde_json::to_value(v)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        }
        assert_eq!(spelled(Attributes::Map), "map");
        assert_eq!(spelled(Attributes::Json), "json");
        assert_eq!(spelled(EngineKind::MergeTree), "MergeTree");
        assert_eq!(
            spelled(EngineKind::ReplicatedMergeTree),
            "ReplicatedMergeTree"
        );
        assert_eq!(spelled(EngineKind::Null), "Null");
        assert_eq!(spelled(InsertFormat::Auto), "auto");
        assert_eq!(spelled(InsertFormat::Native), "native");
        assert_eq!(spelled(InsertFormat::RowBinary), "row_binary");
        assert_eq!(
            (
                Attributes::default(),
                EngineKind::default(),
                InsertFormat::default()
            ),
            (Attributes::Map, EngineKind::MergeTree, InsertFormat::Auto)
        );
        let back: InsertFormat = serde_json::from_value("row_binary".into()).unwrap();
        assert_eq!(back, InsertFormat::RowBinary);
    }

    #[test]
    fn defaults_are_the_table_options_defaults() {
        let o = options(&TableSettings::new("otel", "otel_traces")).unwrap();
        assert_eq!(
            o,
            TableOptions::new(
                Ident::new("database", "otel").unwrap(),
                Ident::new("table", "otel_traces").unwrap()
            )
        );
    }

    #[test]
    fn every_setting_reaches_the_options() {
        let s = TableSettings {
            attributes: Attributes::Json,
            attribute_keys_columns: false,
            engine: EngineKind::ReplicatedMergeTree,
            cluster: Some("main"),
            zk_path: "/zk/{table}",
            replica: "r1",
            ttl: Some("72h"),
            dedup_window: 5,
            ..TableSettings::new("db", "t")
        };
        let layouts = Layouts {
            attribute_items: true,
            map_serialization: crate::model::MapSerialization::Buckets,
        };
        let with_layouts = TableSettings {
            layouts,
            ..TableSettings::new("db", "t")
        };
        assert_eq!(options(&with_layouts).unwrap().layouts, layouts);
        let o = options(&s).unwrap();
        assert_eq!((o.database.as_str(), o.table.as_str()), ("db", "t"));
        assert_eq!(o.attributes, Attributes::Json);
        assert!(!o.attribute_keys_columns);
        assert_eq!(o.engine.kind(), EngineKind::ReplicatedMergeTree);
        assert!(matches!(&o.engine, Engine::Replicated(r)
            if r.cluster.as_str() == "main" && r.zk_path == "/zk/{table}" && r.replica == "r1"));
        assert_eq!(o.ttl.unwrap().to_string(), "3d");
        assert_eq!(o.dedup_window, 5);
        let null = TableSettings {
            engine: EngineKind::Null,
            ..TableSettings::new("db", "t")
        };
        assert_eq!(options(&null).unwrap().engine, Engine::Null);
    }

    #[test]
    fn errors_name_the_setting() {
        let setting = |s: &TableSettings<'_>| match options(s).unwrap_err() {
            SettingError::Invalid(setting, _) => Some(setting),
            SettingError::ClusterRequired => None,
        };
        let ok = TableSettings::new("db", "t");
        assert_eq!(
            setting(&TableSettings {
                database: "",
                ..ok.clone()
            }),
            Some(Setting::Database)
        );
        assert_eq!(
            setting(&TableSettings {
                table: "",
                ..ok.clone()
            }),
            Some(Setting::Table)
        );
        // 64 bytes is a valid name, but `<table>_trace_id_ts` is not.
        let long = "t".repeat(64);
        assert_eq!(
            setting(&TableSettings {
                table: &long,
                ..ok.clone()
            }),
            Some(Setting::Table)
        );
        assert_eq!(
            setting(&TableSettings {
                ttl: Some("3 weeks"),
                ..ok.clone()
            }),
            Some(Setting::Ttl)
        );
        assert_eq!(
            setting(&TableSettings {
                attributes: Attributes::Json,
                layouts: Layouts {
                    attribute_items: true,
                    ..Layouts::default()
                },
                ..ok.clone()
            }),
            Some(Setting::Layouts)
        );
        let replicated = TableSettings {
            engine: EngineKind::ReplicatedMergeTree,
            ..ok.clone()
        };
        assert_eq!(setting(&replicated), None);
        assert_eq!(
            setting(&TableSettings {
                cluster: Some(""),
                ..replicated
            }),
            Some(Setting::Cluster)
        );
        // A cluster without ReplicatedMergeTree is not an error here (front ends decide).
        assert!(
            options(&TableSettings {
                cluster: Some("c"),
                ..ok
            })
            .is_ok()
        );
    }
}
