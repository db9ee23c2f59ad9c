//! The insert columns, checked once: each column of the schema's insert list paired
//! with the shape of value the encoders write for it.
//!
//! Names, order and types come only from `tracehouse_schema::insert_columns`; this file
//! adds nothing to that list. A column whose type the encoders cannot write for its
//! role is refused when the encoder is built, never discovered mid-batch.

use tracehouse_schema::model::attributes_type;
use tracehouse_schema::{
    Attributes, ClickHouseType, Column, SpanColumn, TableOptions, insert_columns,
};

use super::EncodeError;

/// How a string-valued column is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    String,
    /// `LowCardinality(String)`: the same bytes in RowBinary, a dictionary in Native.
    LowCardinality,
}

/// An attribute column's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrShape {
    /// `Map(<key>, String)`.
    Map(Text),
    Json,
}

/// What one column holds per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `DateTime64(9)`.
    Nanos,
    UInt64,
    Text(Text),
    Attrs(AttrShape),
    /// `Array(DateTime64(9))`.
    NanosArray,
    TextArray(Text),
    AttrsArray(AttrShape),
}

/// One insert column and its shape.
#[derive(Debug, Clone)]
pub struct PlannedColumn {
    pub id: SpanColumn,
    pub name: &'static str,
    pub ch_type: ClickHouseType,
    pub shape: Shape,
}

/// The insert columns of `table`, each with its shape.
pub fn plan(table: &TableOptions) -> Result<Vec<PlannedColumn>, EncodeError> {
    insert_columns(table)
        .into_iter()
        .map(|c| {
            let shape = shape_of(&c, table.attributes)?;
            Ok(PlannedColumn {
                id: c.id,
                name: c.name(),
                ch_type: c.ch_type,
                shape,
            })
        })
        .collect()
}

fn text(t: &ClickHouseType) -> Option<Text> {
    match t {
        ClickHouseType::String => Some(Text::String),
        ClickHouseType::LowCardinality(inner) if **inner == ClickHouseType::String => {
            Some(Text::LowCardinality)
        }
        _ => None,
    }
}

fn attrs(t: &ClickHouseType, mode: Attributes) -> Option<AttrShape> {
    match (t, mode) {
        (ClickHouseType::Map(k, v), Attributes::Map) if **v == ClickHouseType::String => {
            text(k).map(AttrShape::Map)
        }
        (ClickHouseType::Json, Attributes::Json) => Some(AttrShape::Json),
        _ => None,
    }
}

fn shape_of(c: &Column, mode: Attributes) -> Result<Shape, EncodeError> {
    use SpanColumn as C;
    let t = &c.ch_type;
    let elem = t.array_element();
    let shape = match c.id {
        C::Timestamp => (*t == ClickHouseType::DateTime64(9)).then_some(Shape::Nanos),
        C::Duration => (*t == ClickHouseType::UInt64).then_some(Shape::UInt64),
        C::TraceId
        | C::SpanId
        | C::ParentSpanId
        | C::TraceState
        | C::SpanName
        | C::SpanKind
        | C::ServiceName
        | C::ScopeName
        | C::ScopeVersion
        | C::StatusCode
        | C::StatusMessage => text(t).map(Shape::Text),
        C::ResourceAttributes | C::SpanAttributes => attrs(t, mode).map(Shape::Attrs),
        C::ResourceAttributesKeys
        | C::SpanAttributesKeys
        | C::EventsName
        | C::LinksTraceId
        | C::LinksSpanId
        | C::LinksTraceState => elem.and_then(text).map(Shape::TextArray),
        C::EventsTimestamp => {
            (elem == Some(&ClickHouseType::DateTime64(9))).then_some(Shape::NanosArray)
        }
        C::EventsAttributes | C::LinksAttributes => {
            elem.and_then(|e| attrs(e, mode)).map(Shape::AttrsArray)
        }
    };
    shape.ok_or_else(|| EncodeError::UnsupportedColumn {
        column: c.name(),
        ch_type: t.to_string(),
        expected: expected(c.id, mode),
    })
}

/// The type the encoders expect for a column, for the error message.
fn expected(id: SpanColumn, mode: Attributes) -> String {
    use SpanColumn as C;
    let a = attributes_type(mode);
    match id {
        C::Timestamp => "DateTime64(9)".into(),
        C::Duration => "UInt64".into(),
        C::ResourceAttributes | C::SpanAttributes => a.to_string(),
        C::EventsAttributes | C::LinksAttributes => ClickHouseType::array(a).to_string(),
        C::EventsTimestamp => "Array(DateTime64(9))".into(),
        C::ResourceAttributesKeys
        | C::SpanAttributesKeys
        | C::EventsName
        | C::LinksTraceId
        | C::LinksSpanId
        | C::LinksTraceState => "Array(String) or Array(LowCardinality(String))".into(),
        _ => "String or LowCardinality(String)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracehouse_schema::Ident;

    fn table(attributes: Attributes, keys: bool) -> TableOptions {
        let mut t = TableOptions::new(
            Ident::new("database", "otel").unwrap(),
            Ident::new("table", "otel_traces").unwrap(),
        );
        t.attributes = attributes;
        t.attribute_keys_columns = keys;
        t
    }

    #[test]
    fn every_variant_plans_exactly_the_schema_insert_columns() {
        for attributes in [Attributes::Map, Attributes::Json] {
            for keys in [false, true] {
                let t = table(attributes, keys);
                let planned = plan(&t).unwrap();
                let schema = insert_columns(&t);
                let got: Vec<(&str, String)> = planned
                    .iter()
                    .map(|c| (c.name, c.ch_type.to_string()))
                    .collect();
                let want: Vec<(&str, String)> = schema
                    .iter()
                    .map(|c| (c.name(), c.ch_type.to_string()))
                    .collect();
                assert_eq!(got, want, "{attributes:?} keys={keys}");
            }
        }
    }

    #[test]
    fn low_cardinality_columns_are_dictionary_text() {
        let planned = plan(&table(Attributes::Map, false)).unwrap();
        let shape = |id| planned.iter().find(|c| c.id == id).unwrap().shape;
        assert_eq!(
            shape(SpanColumn::SpanName),
            Shape::Text(Text::LowCardinality)
        );
        assert_eq!(shape(SpanColumn::TraceId), Shape::Text(Text::String));
        assert_eq!(
            shape(SpanColumn::SpanAttributes),
            Shape::Attrs(AttrShape::Map(Text::LowCardinality))
        );
        assert_eq!(
            shape(SpanColumn::LinksAttributes),
            Shape::AttrsArray(AttrShape::Map(Text::LowCardinality))
        );
    }

    #[test]
    fn a_type_the_encoders_cannot_write_is_refused_up_front() {
        let c = Column {
            id: SpanColumn::Duration,
            ch_type: ClickHouseType::Int64,
            codec: tracehouse_schema::model::Codec::DEFAULT,
            since: 1,
        };
        let err = shape_of(&c, Attributes::Map).unwrap_err().to_string();
        assert!(
            err.contains("Duration") && err.contains("Int64") && err.contains("UInt64"),
            "{err}"
        );
        let c = Column {
            id: SpanColumn::SpanAttributes,
            ch_type: ClickHouseType::Json,
            codec: tracehouse_schema::model::Codec::DEFAULT,
            since: 1,
        };
        assert!(shape_of(&c, Attributes::Map).is_err());
    }
}
