//! The ordered, append-only list of schema migrations and their checksums.
//!
//! Rules every migration follows (and review should enforce):
//! - Never edit or reorder an entry once released: its checksum is in ledgers. Add a
//!   new one instead. The model's `since` fields tie columns and indexes to the
//!   migration that adds them (both name it by its number in [`crate::version`]), so the final model and the migrations cannot drift.
//! - Additive only: `CREATE`, `ADD … IF NOT EXISTS`, `MODIFY SETTING`. Never `DROP`,
//!   `TRUNCATE`, `ALTER … DELETE/UPDATE` or anything that rewrites stored rows. One
//!   mutation is allowed, and only in opt-in migration 6: `MATERIALIZE INDEX` of the indexes
//!   it adds (it writes index files for existing parts, no rows; `crate::layouts` says why).
//! - A migration with several statements must have only idempotent ones, so a crash
//!   half way is repaired by running it again. A `CREATE` stands alone: if the applier
//!   died after it, the object exists without a ledger row and is adopted next time.
//! - An opt-in migration (`opt_in: Some(layout)`) runs only for options that ask for its
//!   layout; others record it `skipped`. It depends on migration 1 alone, since it may run
//!   after later versions. How that keeps the list append-only: [`crate::layouts`].

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::ddl;
use crate::error::Error;
use crate::ident::Ident;
use crate::ident::quote_ident;
use crate::layouts::{self, Layout, OptIn};
use crate::model::TableOptions;
pub use crate::version::LATEST_VERSION;
use crate::version::{
    V_ATTRIBUTE_ITEMS, V_CREATE_LOOKUP_TABLE, V_CREATE_LOOKUP_VIEW, V_CREATE_TRACES_TABLE,
    V_INSERT_DEDUPLICATION, V_MAP_BUCKETS, V_SPAN_NAME_INDEX,
};

/// What a migration does; rendered against the options at plan time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    CreateTracesTable,
    CreateLookupTable,
    CreateLookupView,
    AddIndexes,
    EnableInsertDeduplication,
    /// An opt-in layout ([`crate::layouts`]).
    Layout(Layout),
}

/// One entry of the list.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: u32,
    pub name: &'static str,
    step: Step,
}

impl Migration {
    /// The layout an opt-in migration adds; `None` for the migrations every table runs.
    pub fn opt_in(&self) -> Option<Layout> {
        match self.step {
            Step::Layout(l) => Some(l),
            _ => None,
        }
    }
}

/// All migrations, oldest first. Append only.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: V_CREATE_TRACES_TABLE,
        name: "create_traces_table",
        step: Step::CreateTracesTable,
    },
    Migration {
        version: V_CREATE_LOOKUP_TABLE,
        name: "create_trace_id_ts_table",
        step: Step::CreateLookupTable,
    },
    Migration {
        version: V_CREATE_LOOKUP_VIEW,
        name: "create_trace_id_ts_view",
        step: Step::CreateLookupView,
    },
    Migration {
        version: V_SPAN_NAME_INDEX,
        name: "add_lower_span_name_index",
        step: Step::AddIndexes,
    },
    Migration {
        version: V_INSERT_DEDUPLICATION,
        name: "enable_insert_deduplication",
        step: Step::EnableInsertDeduplication,
    },
    Migration {
        version: V_ATTRIBUTE_ITEMS,
        name: "add_attribute_items",
        step: Step::Layout(Layout::AttributeItems),
    },
    Migration {
        version: V_MAP_BUCKETS,
        name: "bucketed_map_serialization",
        step: Step::Layout(Layout::MapBuckets),
    },
];

/// The object a `CREATE` migration makes, which adoption looks for first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Creates {
    TracesTable(Ident),
    LookupTable(Ident),
    LookupView(Ident),
}

impl Creates {
    pub fn name(&self) -> &Ident {
        match self {
            Self::TracesTable(n) | Self::LookupTable(n) | Self::LookupView(n) => n,
        }
    }
}

/// A migration rendered for a set of options: the exact SQL it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub version: u32,
    pub name: &'static str,
    /// Empty when the migration does not apply to these options (e.g. indexes on a
    /// `Null` table); it is then recorded as a no-op so versions stay contiguous.
    pub statements: Vec<String>,
    /// Hex SHA-256 of the statements; what the ledger keeps to detect edits.
    pub checksum: String,
    pub creates: Option<Creates>,
    /// For an opt-in migration: its layout and whether these options ask for it (when not,
    /// `statements` is empty and it is recorded `skipped`).
    pub opt_in: Option<OptIn>,
}

impl Migration {
    /// The statements this migration runs for `opts`.
    pub fn render(&self, opts: &TableOptions) -> Result<Rendered, Error> {
        let stored = opts.is_stored();
        let (statements, creates) = match self.step {
            Step::CreateTracesTable => (
                vec![ddl::create_traces_table(opts, self.version)],
                Some(Creates::TracesTable(opts.table.clone())),
            ),
            Step::CreateLookupTable if stored => (
                vec![ddl::create_lookup_table(opts)?],
                Some(Creates::LookupTable(opts.lookup_table()?)),
            ),
            Step::CreateLookupView if stored => (
                vec![ddl::create_lookup_view(opts)?],
                Some(Creates::LookupView(opts.lookup_view()?)),
            ),
            Step::CreateLookupTable | Step::CreateLookupView => (Vec::new(), None),
            Step::AddIndexes => (
                ddl::add_columns(opts, self.version)
                    .into_iter()
                    .chain(ddl::add_indexes(opts, self.version))
                    .collect(),
                None,
            ),
            Step::EnableInsertDeduplication => (
                ddl::enable_insert_deduplication(opts)?.unwrap_or_default(),
                None,
            ),
            Step::Layout(l) if l.wanted(opts) => (layout_statements(l, opts), None),
            Step::Layout(_) => (Vec::new(), None),
        };
        Ok(Rendered {
            version: self.version,
            name: self.name,
            checksum: checksum(&statements),
            statements,
            creates,
            opt_in: self.opt_in().map(|layout| OptIn {
                layout,
                wanted: layout.wanted(opts),
            }),
        })
    }
}

/// Renders every migration for `opts`, oldest first.
pub fn render_all(opts: &TableOptions) -> Result<Vec<Rendered>, Error> {
    opts.validate()?;
    layouts::check_options(opts)?;
    MIGRATIONS.iter().map(|m| m.render(opts)).collect()
}

/// SHA-256 over the statements, each terminated by `;\n`, in hex.
pub fn checksum(statements: &[String]) -> String {
    let mut h = Sha256::new();
    for s in statements {
        h.update(s.as_bytes());
        h.update(b";\n");
    }
    h.finalize()
        .iter()
        .fold(String::with_capacity(64), |mut out, b| {
            write!(out, "{b:02x}").unwrap();
            out
        })
}

/// The whole schema as one SQL script (what `schema print` shows): the database,
/// then every migration in order, each statement terminated by `;`.
pub fn script(opts: &TableOptions) -> Result<String, Error> {
    let mut out = format!(
        "-- tracehouse traces schema for {}.{} (migrations 1..{LATEST_VERSION})\n\n{};\n",
        opts.database,
        opts.table,
        ddl::create_database(opts)
    );
    for r in render_all(opts)? {
        write!(out, "\n-- {:04} {}", r.version, r.name).unwrap();
        if let Some(o) = r.opt_in.filter(|o| !o.wanted) {
            writeln!(out, " (opt-in layout {}: not asked for)", o.layout.option()).unwrap();
        } else if r.statements.is_empty() {
            out.push_str(" (nothing to do for this engine)\n");
        } else {
            out.push('\n');
        }
        for s in &r.statements {
            writeln!(out, "{s};").unwrap();
        }
    }
    Ok(out)
}

/// The statements that add `layout` (idempotent, additive).
///
/// Migration 6 ends with `MATERIALIZE INDEX … SETTINGS mutations_sync = 2`, the one
/// statement of the list that is a mutation (it writes index files for the parts that existed
/// before `ADD INDEX`, and rewrites no rows): on the 26.9 engine, a text index over an ALIAS
/// column whose expression has a lambda breaks every `has(SpanAttributeItems, …)` while the
/// table mixes parts with and without the index (`Code: 43 … First argument for function
/// arrayMap must be a function`: the lambda is lost when the index's expression is rebuilt
/// for the parts lacking it). Parts all without it, or all with it, answer. So the layout is
/// recorded (and shown in the status) only once every part has it; on a large table this
/// waits while the index is built, which the operator's schema deadline only stops
/// waiting for (the apply runs to its end).
pub(crate) fn layout_statements(layout: Layout, opts: &TableOptions) -> Vec<String> {
    let alter = format!(
        "ALTER TABLE {}{}",
        ddl::qualified(opts, &opts.table),
        ddl::on_cluster(opts)
    );
    match layout {
        Layout::AttributeItems => {
            let columns: Vec<String> = layouts::alias_columns()
                .iter()
                .map(|(name, expr)| {
                    format!(
                        "    ADD COLUMN IF NOT EXISTS {} Array(String) ALIAS {expr}",
                        quote_ident(name)
                    )
                })
                .collect();
            let materialize: Vec<String> = crate::model::indexes(opts)
                .iter()
                .filter(|i| i.since == V_ATTRIBUTE_ITEMS)
                .map(|i| format!("    MATERIALIZE INDEX {}", quote_ident(i.name)))
                .collect();
            // Three statements: the indexes name the columns the first one adds, and the
            // parts written before them get them (see above).
            std::iter::once(format!("{alter}\n{}", columns.join(",\n")))
                .chain(ddl::add_indexes(opts, V_ATTRIBUTE_ITEMS))
                .chain(std::iter::once(format!(
                    "{alter}\n{} SETTINGS mutations_sync = 2",
                    materialize.join(",\n")
                )))
                .collect()
        }
        Layout::MapBuckets => vec![format!(
            "{alter}\nMODIFY SETTING {}",
            layouts::MAP_BUCKETS_SETTINGS
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{self, Attributes, Engine};

    fn opts() -> TableOptions {
        crate::model::default_options()
    }

    #[test]
    fn versions_are_contiguous_from_one_and_names_unique() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "{}", m.name);
        }
        assert_eq!(MIGRATIONS.last().unwrap().version, LATEST_VERSION);
        let mut names: Vec<_> = MIGRATIONS.iter().map(|m| m.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), MIGRATIONS.len());
    }

    #[test]
    fn every_model_element_is_added_by_a_migration_that_renders_it() {
        for attributes in [Attributes::Map, Attributes::Json] {
            let mut o = opts();
            o.attributes = attributes;
            let rendered = render_all(&o).unwrap();
            let sql_of = |v: u32| rendered[v as usize - 1].statements.join("\n");
            for c in model::columns(&o) {
                let name = c.id.nested().map_or(c.name(), |(p, _)| p);
                assert!(
                    sql_of(c.since).contains(&format!("`{name}`")),
                    "{}",
                    c.name()
                );
            }
            for i in model::indexes(&o) {
                assert!(
                    sql_of(i.since).contains(&format!("`{}`", i.name)),
                    "{}",
                    i.name
                );
            }
        }
    }

    #[test]
    fn nothing_destructive_is_ever_rendered() {
        for attributes in [Attributes::Map, Attributes::Json] {
            for engine in [Engine::MergeTree, Engine::Null] {
                let mut o = opts();
                o.attributes = attributes;
                o.engine = engine;
                let all = script(&o).unwrap().to_uppercase();
                // Compare whole words, so `ttl_only_drop_parts` is not a DROP.
                let words: Vec<&str> = all
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .collect();
                for word in [
                    "DROP", "TRUNCATE", "DELETE", "UPDATE", "RENAME", "DETACH", "REPLACE",
                ] {
                    assert!(!words.contains(&word), "{word} in\n{all}");
                }
                for phrase in ["MODIFY COLUMN", "MATERIALIZE INDEX", "MATERIALIZE COLUMN"] {
                    assert!(!all.contains(phrase), "{phrase} in\n{all}");
                }
            }
        }
    }

    #[test]
    fn checksums_are_stable_and_follow_the_rendered_text() {
        let a = render_all(&opts()).unwrap();
        let b = render_all(&opts()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a[0].checksum.len(), 64);
        let mut ttl = opts();
        ttl.ttl = Some(crate::model::Ttl::days(7).unwrap());
        let c = render_all(&ttl).unwrap();
        assert_ne!(a[0].checksum, c[0].checksum, "TTL is part of v1's text");
        assert_eq!(a[3].checksum, c[3].checksum, "v4 does not mention TTL");
        // Known value, so an accidental change of the hashing itself is caught too.
        assert_eq!(
            checksum(&[]),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn null_engine_only_creates_the_table() {
        let mut o = opts();
        o.engine = Engine::Null;
        let r = render_all(&o).unwrap();
        assert_eq!(r[0].statements.len(), 1);
        assert!(r[1..].iter().all(|m| m.statements.is_empty()));
        assert!(
            script(&o)
                .unwrap()
                .contains("-- 0002 create_trace_id_ts_table (nothing to do")
        );
    }
}
