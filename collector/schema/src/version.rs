//! The schema's version numbers: one per migration, in the order they were released.
//!
//! Their own module because two sides need them and neither may own them: the model ties
//! each column and index to the version that adds it (its `since`), and the migrations
//! list says what each version does. With the numbers here, `model` and `migrations`
//! no longer import each other; `migrations` depends on `model`, never the reverse.
//!
//! Append only, like the migrations: a released number never changes meaning.

pub const V_CREATE_TRACES_TABLE: u32 = 1;
pub const V_CREATE_LOOKUP_TABLE: u32 = 2;
pub const V_CREATE_LOOKUP_VIEW: u32 = 3;
pub const V_SPAN_NAME_INDEX: u32 = 4;
pub const V_INSERT_DEDUPLICATION: u32 = 5;
/// Opt-in ([`crate::layouts`]): `*AttributeItems` ALIAS columns with text indexes.
pub const V_ATTRIBUTE_ITEMS: u32 = 6;
/// Opt-in ([`crate::layouts`]): bucketed Map serialization.
pub const V_MAP_BUCKETS: u32 = 7;
/// The version a fully migrated table is at. Opt-in versions count: a table whose options
/// did not ask for one records it as `skipped` ([`crate::layouts`] says why).
pub const LATEST_VERSION: u32 = V_MAP_BUCKETS;
