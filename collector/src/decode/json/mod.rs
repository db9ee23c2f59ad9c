//! OTLP/JSON → the prost `ExportTraceServiceRequest`, straight from the bytes.
//!
//! The serde support of `opentelemetry-proto` is not used: it reads enums only as
//! numbers, doubles only as JSON numbers and keys only in lowerCamelCase, while the
//! OTLP/JSON spec (the protobuf JSON mapping) and the OTel Collector's own reader
//! accept more. This reader follows the Collector (`pdata`'s JSON unmarshaler):
//!
//! - ids (`traceId`, `spanId`, `parentSpanId`) are hex strings, either case;
//! - 64-bit integers (`startTimeUnixNano`, `intValue`, …) are strings or numbers, and
//!   the 32-bit ones (`flags`, `dropped*Count`) are accepted the same way;
//! - enums (`kind`, `status.code`) are numbers or their proto names
//!   (`SPAN_KIND_SERVER`, `STATUS_CODE_ERROR`);
//! - `doubleValue` is a number or `"NaN"`, `"Infinity"`, `"-Infinity"` (or a numeric
//!   string), `bytesValue` standard or URL-safe base64, padded or not;
//! - keys are lowerCamelCase or the proto's snake_case; unknown keys are ignored and
//!   `null` means the field's default.
//!
//! Every message is filled in one pass with no intermediate `serde_json::Value`; the
//! recursion of nested `kvlistValue`/`arrayValue` is bounded by serde_json's depth
//! limit (128), so hostile input cannot overflow the stack.

use std::fmt;
use std::marker::PhantomData;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

mod scalars;

use scalars::{Base64, Bool, Double, Enum, Hex, Key, Str, int};

/// Decodes one OTLP/JSON `ExportTraceServiceRequest`; trailing non-whitespace is an error.
pub fn decode(bytes: &[u8]) -> Result<ExportTraceServiceRequest, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let req = Msg::<ExportTraceServiceRequest>::new().deserialize(&mut de)?;
    de.end()?;
    Ok(req)
}

/// A protobuf message readable from an OTLP/JSON object, one field at a time.
trait JsonMessage: Default {
    const NAME: &'static str;
    /// Reads the value of `key` (already consumed) from `map`, or skips it if unknown.
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Seed for a whole message; `null` reads as the default message.
struct Msg<T>(PhantomData<T>);

impl<T> Msg<T> {
    fn new() -> Self {
        Self(PhantomData)
    }
}

impl<'de, T: JsonMessage> DeserializeSeed<'de> for Msg<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: JsonMessage> Visitor<'de> for Msg<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an OTLP/JSON {} object", T::NAME)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut msg = T::default();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            msg.field(&key.0, &mut map)?;
        }
        Ok(msg)
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::default())
    }
}

/// An optional message field: `null` or absent is `None`.
struct OptMsg<T>(PhantomData<T>);

impl<'de, T: JsonMessage> DeserializeSeed<'de> for OptMsg<T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, T: JsonMessage> Visitor<'de> for OptMsg<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an OTLP/JSON {} object or null", T::NAME)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        Msg::<T>::new().deserialize(d).map(Some)
    }
}

/// A repeated message field: a JSON array, `null` meaning empty.
struct Repeated<T>(PhantomData<T>);

fn repeated<T>() -> Repeated<T> {
    Repeated(PhantomData)
}

impl<'de, T: JsonMessage> DeserializeSeed<'de> for Repeated<T> {
    type Value = Vec<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: JsonMessage> Visitor<'de> for Repeated<T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an array of OTLP/JSON {} objects", T::NAME)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element_seed(Msg::<T>::new())? {
            out.push(item);
        }
        Ok(out)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<T>, E> {
        Ok(Vec::new())
    }
}

const SPAN_KIND: Enum = Enum {
    field: "kind",
    by_name: |s| SpanKind::from_str_name(s).map(|k| k as i32),
};
const STATUS_CODE: Enum = Enum {
    field: "code",
    by_name: |s| StatusCode::from_str_name(s).map(|c| c as i32),
};

fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

impl JsonMessage for ExportTraceServiceRequest {
    const NAME: &'static str = "ExportTraceServiceRequest";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "resourceSpans" | "resource_spans" => {
                self.resource_spans = map.next_value_seed(repeated())?
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for ResourceSpans {
    const NAME: &'static str = "ResourceSpans";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "resource" => self.resource = map.next_value_seed(OptMsg(PhantomData))?,
            "scopeSpans" | "scope_spans" => self.scope_spans = map.next_value_seed(repeated())?,
            "schemaUrl" | "schema_url" => self.schema_url = map.next_value_seed(Str)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for Resource {
    const NAME: &'static str = "Resource";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "attributes" => self.attributes = map.next_value_seed(repeated())?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                self.dropped_attributes_count =
                    map.next_value_seed(int("droppedAttributesCount"))?
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for ScopeSpans {
    const NAME: &'static str = "ScopeSpans";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "scope" => self.scope = map.next_value_seed(OptMsg(PhantomData))?,
            "spans" => self.spans = map.next_value_seed(repeated())?,
            "schemaUrl" | "schema_url" => self.schema_url = map.next_value_seed(Str)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for InstrumentationScope {
    const NAME: &'static str = "InstrumentationScope";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "name" => self.name = map.next_value_seed(Str)?,
            "version" => self.version = map.next_value_seed(Str)?,
            "attributes" => self.attributes = map.next_value_seed(repeated())?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                self.dropped_attributes_count =
                    map.next_value_seed(int("droppedAttributesCount"))?
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for Span {
    const NAME: &'static str = "Span";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "traceId" | "trace_id" => self.trace_id = map.next_value_seed(Hex("traceId"))?,
            "spanId" | "span_id" => self.span_id = map.next_value_seed(Hex("spanId"))?,
            "traceState" | "trace_state" => self.trace_state = map.next_value_seed(Str)?,
            "parentSpanId" | "parent_span_id" => {
                self.parent_span_id = map.next_value_seed(Hex("parentSpanId"))?
            }
            "flags" => self.flags = map.next_value_seed(int("flags"))?,
            "name" => self.name = map.next_value_seed(Str)?,
            "kind" => self.kind = map.next_value_seed(SPAN_KIND)?,
            "startTimeUnixNano" | "start_time_unix_nano" => {
                self.start_time_unix_nano = map.next_value_seed(int("startTimeUnixNano"))?
            }
            "endTimeUnixNano" | "end_time_unix_nano" => {
                self.end_time_unix_nano = map.next_value_seed(int("endTimeUnixNano"))?
            }
            "attributes" => self.attributes = map.next_value_seed(repeated())?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                self.dropped_attributes_count =
                    map.next_value_seed(int("droppedAttributesCount"))?
            }
            "events" => self.events = map.next_value_seed(repeated())?,
            "droppedEventsCount" | "dropped_events_count" => {
                self.dropped_events_count = map.next_value_seed(int("droppedEventsCount"))?
            }
            "links" => self.links = map.next_value_seed(repeated())?,
            "droppedLinksCount" | "dropped_links_count" => {
                self.dropped_links_count = map.next_value_seed(int("droppedLinksCount"))?
            }
            "status" => self.status = map.next_value_seed(OptMsg(PhantomData))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for Event {
    const NAME: &'static str = "Event";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "timeUnixNano" | "time_unix_nano" => {
                self.time_unix_nano = map.next_value_seed(int("timeUnixNano"))?
            }
            "name" => self.name = map.next_value_seed(Str)?,
            "attributes" => self.attributes = map.next_value_seed(repeated())?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                self.dropped_attributes_count =
                    map.next_value_seed(int("droppedAttributesCount"))?
            }
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for Link {
    const NAME: &'static str = "Link";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "traceId" | "trace_id" => self.trace_id = map.next_value_seed(Hex("links.traceId"))?,
            "spanId" | "span_id" => self.span_id = map.next_value_seed(Hex("links.spanId"))?,
            "traceState" | "trace_state" => self.trace_state = map.next_value_seed(Str)?,
            "attributes" => self.attributes = map.next_value_seed(repeated())?,
            "droppedAttributesCount" | "dropped_attributes_count" => {
                self.dropped_attributes_count =
                    map.next_value_seed(int("droppedAttributesCount"))?
            }
            "flags" => self.flags = map.next_value_seed(int("flags"))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for Status {
    const NAME: &'static str = "Status";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "message" => self.message = map.next_value_seed(Str)?,
            "code" => self.code = map.next_value_seed(STATUS_CODE)?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for KeyValue {
    const NAME: &'static str = "KeyValue";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "key" => self.key = map.next_value_seed(Str)?,
            "value" => self.value = map.next_value_seed(OptMsg(PhantomData))?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for AnyValue {
    const NAME: &'static str = "AnyValue";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        use any_value::Value as V;
        // A oneof: the last member present wins, as in protobuf's JSON reader.
        let value = match key {
            "stringValue" | "string_value" => V::StringValue(map.next_value_seed(Str)?),
            "boolValue" | "bool_value" => V::BoolValue(map.next_value_seed(Bool)?),
            "intValue" | "int_value" => V::IntValue(map.next_value_seed(int("intValue"))?),
            "doubleValue" | "double_value" => V::DoubleValue(map.next_value_seed(Double)?),
            "arrayValue" | "array_value" => {
                V::ArrayValue(map.next_value_seed(Msg::<ArrayValue>::new())?)
            }
            "kvlistValue" | "kvlist_value" => {
                V::KvlistValue(map.next_value_seed(Msg::<KeyValueList>::new())?)
            }
            "bytesValue" | "bytes_value" => V::BytesValue(map.next_value_seed(Base64)?),
            _ => return skip(map),
        };
        self.value = Some(value);
        Ok(())
    }
}

impl JsonMessage for ArrayValue {
    const NAME: &'static str = "ArrayValue";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "values" => self.values = map.next_value_seed(repeated())?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

impl JsonMessage for KeyValueList {
    const NAME: &'static str = "KeyValueList";
    fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "values" => self.values = map.next_value_seed(repeated())?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
