"""The table layouts the query benchmark compares, as data: how each one is made (the attribute
columns `tracehouse-collector schema apply` creates, then additive statements on top) and how
its readers ask for one attribute.

Every layout starts from the table the collector creates today, so every statement here is an
additive migration (ADD COLUMN of an ALIAS, ADD INDEX, MODIFY SETTING) that an existing table
could take without a rewrite:

- `map`: today's table: `Map(LowCardinality(String), String)` attributes with bloom filters on
  `mapKeys`/`mapValues`, TraceId bloom filter, the `_trace_id_ts` lookup table.
- `map_items`: + `ResourceAttributeItems`/`SpanAttributeItems` `Array(String)` ALIAS columns
  (`key=value` per entry, stored nowhere) with `text(tokenizer = 'array')` indexes, as ClickStack
  ships them and as opentelemetry-collector-contrib PR #50878 proposes for the exporter (which
  also indexes TraceId with a text index: `idx_trace_id_text` here). Readers rewrite
  `SpanAttributes['k'] = 'v'` into `has(SpanAttributeItems, 'k=v')` to hit the index.
- `map_buckets`: + `map_serialization_version = 'with_buckets'` (MergeTree setting, ClickHouse
  26.3+): merged parts store Map keys in buckets so a single key is read without the whole map.
  With the defaults (`map_buckets_min_avg_size = 32`) a span's ~16 attributes stay in one
  bucket, so nothing changes; `map_buckets_min_avg_size = 0` with the `linear` strategy gives
  about one bucket per key (checked on 200 000 spans: 82 substreams instead of 6, a one-key
  facet query 200 ms → 19 ms). Parts written by inserts keep the basic serialization
  (`map_serialization_version_for_zero_level_parts`), so inserts pay nothing; merges do.
- `map_trace_proj`: + a projection of every column ordered by `(TraceId, toDateTime(Timestamp))`
  (ClickStack's `prj_traceid_time`): a trace's spans are scattered over ~20 granules of the
  table's `(ServiceName, SpanName, …)` order and every one of them is read whole (its maps
  too); in the projection they are adjacent. A second copy of the data.
- `json`: the `JSON` attribute variant (`schema apply --attributes json`), with the
  `ResourceAttributesKeys`/`SpanAttributesKeys` columns and their bloom filters, as the schema
  crate makes it by default (`attribute_keys_columns`, the CRD's `attributeKeysColumns`).
- `json_nokeys`: the same without the keys columns (`schema apply --no-attribute-keys`, the
  collector's `attribute_keys: false`): the other side of what the keys columns cost and buy.

How a layout's readers ask about attribute *keys* (which keys exist, spans that have one): with
the keys columns, `SpanAttributesKeys` (`has(SpanAttributesKeys, 'k')`, which the bloom filter
serves); without them on the JSON table, `JSONAllPaths(SpanAttributes)` to list the keys and the
path itself (`SpanAttributes.`k` IS NOT NULL`) to test one; on the Map table, which has no keys
columns (the schema crate ignores the option for Map), the map's own keys subcolumn
(`SpanAttributes.keys`, as HyperDX lists Map keys) and `mapContains(SpanAttributes, 'k')`, which
the `mapKeys` bloom filter serves.

`map_items` (less `idx_trace_id_text`) and `map_buckets` are what the schema crate offers as
opt-in layouts (collector/schema/src/layouts.rs, the operator's
`spec.clickhouse.schema.layouts`); `map_trace_proj` is not offered (docs/querybench.md says why).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    name: str
    attributes: str  # what `schema apply --attributes` and the collector's config take
    summary: str
    extra_ddl: tuple = ()  # statements with {t} = `db`.`otel_traces`
    items: bool = False  # has SpanAttributeItems (readers can use has(Items, 'k=v'))
    keys: bool = False  # has the *AttributesKeys columns (JSON variant only)

    @property
    def schema_flags(self):
        """More `schema apply` flags: a JSON table without keys columns asks for none."""
        return ("--no-attribute-keys",) if self.attributes == "json" and not self.keys else ()

    @property
    def attribute_keys(self):
        """The collector's `clickhouse.attribute_keys`: fill the keys columns (JSON only)."""
        return self.attributes != "json" or self.keys

    def ddl(self, db):
        t = f"`{db}`.`otel_traces`"
        return [s.format(t=t) for s in self.extra_ddl]

    def attr(self, key):
        """A reader's expression for one span attribute's value, as a String."""
        if self.attributes == "json":
            return f"toString(SpanAttributes.`{key}`)"
        return f"SpanAttributes['{key}']"

    def attr_equals(self, key, value):
        """The predicate a reader tuned for this layout writes for attribute key = value."""
        if self.items:
            return f"has(SpanAttributeItems, '{sql_str(key)}={sql_str(value)}')"
        return f"{self.attr(key)} = '{sql_str(value)}'"

    def keys_of(self, scope):
        """A reader's expression for the array of a row's attribute keys, `scope` "Span" or
        "Resource": the keys column where there is one, else the best the table offers."""
        col = f"{scope}Attributes"
        if self.keys:
            return f"{col}Keys"
        if self.attributes == "json":
            return f"JSONAllPaths({col})"
        return f"{col}.keys"

    def has_key(self, key):
        """The predicate a reader writes for "the span has attribute key `key`"."""
        if self.keys:
            return f"has(SpanAttributesKeys, '{sql_str(key)}')"
        if self.attributes == "json":
            return f"SpanAttributes.`{key}` IS NOT NULL"
        return f"mapContains(SpanAttributes, '{sql_str(key)}')"


_ITEMS = "arrayMap(kv -> concat(kv.1, '=', kv.2), CAST({col}, 'Array(Tuple(String, String))'))"

LAYOUTS = {
    "map": Layout("map", "map", "today's table: Map attributes, bloom filters on keys and values"),
    "map_items": Layout(
        "map_items", "map",
        "+ key=value item ALIAS columns with text indexes (PR #50878 / ClickStack)",
        extra_ddl=(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS ResourceAttributeItems Array(String) ALIAS "
            + _ITEMS.format(col="ResourceAttributes"),
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS SpanAttributeItems Array(String) ALIAS "
            + _ITEMS.format(col="SpanAttributes"),
            "ALTER TABLE {t} ADD INDEX IF NOT EXISTS idx_res_attr_items ResourceAttributeItems "
            "TYPE text(tokenizer = 'array') GRANULARITY 1",
            "ALTER TABLE {t} ADD INDEX IF NOT EXISTS idx_span_attr_items SpanAttributeItems "
            "TYPE text(tokenizer = 'array') GRANULARITY 1",
            "ALTER TABLE {t} ADD INDEX IF NOT EXISTS idx_trace_id_text TraceId "
            "TYPE text(tokenizer = 'array') GRANULARITY 1",
        ),
        items=True),
    "map_buckets": Layout(
        "map_buckets", "map", "+ bucketed Map serialization, about one bucket per key",
        extra_ddl=("ALTER TABLE {t} MODIFY SETTING map_serialization_version = 'with_buckets', "
                   "map_buckets_strategy = 'linear', map_buckets_min_avg_size = 0",)),
    "map_trace_proj": Layout(
        "map_trace_proj", "map", "+ a projection ordered by TraceId (ClickStack's prj_traceid_time)",
        extra_ddl=("ALTER TABLE {t} ADD PROJECTION IF NOT EXISTS prj_traceid_time "
                   "(SELECT * ORDER BY (TraceId, toDateTime(Timestamp)))",)),
    "json": Layout("json", "json", "JSON attributes (+ *AttributesKeys with bloom filters)",
                   keys=True),
    "json_nokeys": Layout("json_nokeys", "json", "JSON attributes without the *AttributesKeys "
                          "columns (--no-attribute-keys)"),
}


def sql_str(s):
    """A value inside a single-quoted ClickHouse string literal."""
    return str(s).replace("\\", "\\\\").replace("'", "\\'")


def parse_layouts(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in LAYOUTS]
    if unknown or not names:
        raise ValueError(f"unknown layout(s) {unknown}; known: {', '.join(LAYOUTS)}")
    return [LAYOUTS[n] for n in names]
