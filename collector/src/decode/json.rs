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

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, Link, SpanKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

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

/// An object key, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string field; `null` is `""`.
struct Str;

impl<'de> DeserializeSeed<'de> for Str {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Str {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<String, E> {
        Ok(String::new())
    }
}

/// A trace or span id: hex string (either case) → bytes; `null` or `""` is empty.
struct Hex(&'static str);

impl<'de> DeserializeSeed<'de> for Hex {
    type Value = Vec<u8>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Hex {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: a hex string", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        decode_hex(v.as_bytes())
            .ok_or_else(|| E::custom(format_args!("{}: invalid hex id {v:?}", self.0)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<u8>, E> {
        Ok(Vec::new())
    }
}

fn decode_hex(s: &[u8]) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|p| Some(nibble(p[0])? << 4 | nibble(p[1])?))
        .collect()
}

/// An integer field of any width: a JSON number (integral) or a decimal string.
/// `null` is 0. The value is range-checked into `T`.
struct Int<T>(&'static str, PhantomData<T>);

fn int<T>(field: &'static str) -> Int<T> {
    Int(field, PhantomData)
}

impl<'de, T: TryFrom<i128>> DeserializeSeed<'de> for Int<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

impl<T: TryFrom<i128>> Int<T> {
    fn fit<E: de::Error>(&self, v: i128) -> Result<T, E> {
        T::try_from(v).map_err(|_| {
            E::custom(format_args!(
                "{}: {v} is out of range for {}",
                self.0,
                std::any::type_name::<T>()
            ))
        })
    }
}

impl<T: TryFrom<i128>> Visitor<'_> for Int<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: an integer or a string holding one", self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.fit(i128::from(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        self.fit(i128::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // The protobuf JSON mapping allows exponent notation for integral values (1e9).
        if v.fract() == 0.0 && v.abs() < 2f64.powi(64) {
            self.fit(v as i128)
        } else {
            Err(E::custom(format_args!("{}: {v} is not an integer", self.0)))
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        let n: i128 = v
            .trim()
            .parse()
            .map_err(|_| E::custom(format_args!("{}: {v:?} is not an integer", self.0)))?;
        self.fit(n)
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        self.fit(0)
    }
}

/// `doubleValue`: a number, `"NaN"`, `"Infinity"`, `"-Infinity"` or a numeric string.
struct Double;

impl<'de> DeserializeSeed<'de> for Double {
    type Value = f64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Double {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("doubleValue: a number, \"NaN\", \"Infinity\" or \"-Infinity\"")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        match v {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => v
                .parse()
                .map_err(|_| E::custom(format_args!("doubleValue: {v:?} is not a number"))),
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<f64, E> {
        Ok(0.0)
    }
}

/// `boolValue`: `true`/`false`; `null` is false.
struct Bool;

impl<'de> DeserializeSeed<'de> for Bool {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Bool {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("boolValue: true or false")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
        Ok(v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// `bytesValue`: standard or URL-safe base64, padding optional.
struct Base64;

impl<'de> DeserializeSeed<'de> for Base64 {
    type Value = Vec<u8>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(self)
    }
}

const B64_CONFIG: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const B64_STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, B64_CONFIG);
const B64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, B64_CONFIG);

impl Visitor<'_> for Base64 {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("bytesValue: a base64 string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        B64_STANDARD
            .decode(v)
            .or_else(|_| B64_URL_SAFE.decode(v))
            .map_err(|e| E::custom(format_args!("bytesValue: invalid base64: {e}")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<u8>, E> {
        Ok(Vec::new())
    }
}

/// An enum field: its number, or its proto name looked up by `by_name`.
struct Enum {
    field: &'static str,
    by_name: fn(&str) -> Option<i32>,
}

impl<'de> DeserializeSeed<'de> for Enum {
    type Value = i32;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<i32, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for Enum {
    type Value = i32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: an enum number or name", self.field)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i32, E> {
        int::<i32>(self.field).visit_u64(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i32, E> {
        int::<i32>(self.field).visit_i64(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<i32, E> {
        (self.by_name)(v)
            .or_else(|| v.parse().ok())
            .ok_or_else(|| E::custom(format_args!("{}: unknown enum value {v:?}", self.field)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<i32, E> {
        Ok(0)
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
mod tests {
    use super::*;
    use any_value::Value as V;

    fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> &'a V {
        attrs
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| v.value.as_ref())
            .unwrap_or_else(|| panic!("no attribute {key}"))
    }

    /// What the OpenTelemetry Collector's kafka exporter writes with
    /// `encoding: otlp_json` (pdata's JSON marshaler: camelCase keys, hex ids,
    /// 64-bit integers as strings, enums as numbers, empty fields omitted).
    const COLLECTOR_SAMPLE: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"checkout"}},{"key":"host.cpus","value":{"intValue":"8"}}]},"scopeSpans":[{"scope":{"name":"io.opentelemetry.http","version":"1.2.3"},"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173","traceState":"k=v","name":"GET /cart","kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000","attributes":[{"key":"http.status_code","value":{"intValue":"200"}},{"key":"ratio","value":{"doubleValue":0.25}},{"key":"ok","value":{"boolValue":true}},{"key":"blob","value":{"bytesValue":"AQID"}},{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"stringValue":"b"}]}}},{"key":"nested","value":{"kvlistValue":{"values":[{"key":"x","value":{"intValue":"1"}}]}}}],"droppedAttributesCount":1,"events":[{"timeUnixNano":"1544712660500000000","name":"exception","attributes":[{"key":"exception.type","value":{"stringValue":"E"}}]}],"links":[{"traceId":"5b8efff798038103d269b633813fc60d","spanId":"eee19b7ec3c1b175","traceState":"a=b","attributes":[{"key":"link.kind","value":{"stringValue":"follows"}}],"flags":256}],"status":{"message":"boom","code":2},"flags":257}]}],"schemaUrl":"https://opentelemetry.io/schemas/1.21.0"}]}"#;

    #[test]
    fn reads_what_the_collector_kafka_exporter_writes() {
        let req = decode(COLLECTOR_SAMPLE.as_bytes()).unwrap();
        let rs = &req.resource_spans[0];
        assert_eq!(rs.schema_url, "https://opentelemetry.io/schemas/1.21.0");
        let res = rs.resource.as_ref().unwrap();
        assert_eq!(
            attr(&res.attributes, "service.name"),
            &V::StringValue("checkout".into())
        );
        assert_eq!(attr(&res.attributes, "host.cpus"), &V::IntValue(8));
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().version, "1.2.3");
        let span = &ss.spans[0];
        assert_eq!(
            span.trace_id,
            [
                0x5b, 0x8e, 0xff, 0xf7, 0x98, 0x03, 0x81, 0x03, 0xd2, 0x69, 0xb6, 0x33, 0x81, 0x3f,
                0xc6, 0x0c
            ]
        );
        assert_eq!(
            span.span_id,
            [0xee, 0xe1, 0x9b, 0x7e, 0xc3, 0xc1, 0xb1, 0x74]
        );
        assert_eq!(span.parent_span_id[7], 0x73);
        assert_eq!(span.trace_state, "k=v");
        assert_eq!(span.kind, SpanKind::Server as i32);
        assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(span.end_time_unix_nano, 1_544_712_661_000_000_000);
        assert_eq!(span.flags, 257);
        assert_eq!(span.dropped_attributes_count, 1);
        assert_eq!(
            attr(&span.attributes, "http.status_code"),
            &V::IntValue(200)
        );
        assert_eq!(attr(&span.attributes, "ratio"), &V::DoubleValue(0.25));
        assert_eq!(attr(&span.attributes, "ok"), &V::BoolValue(true));
        assert_eq!(
            attr(&span.attributes, "blob"),
            &V::BytesValue(vec![1, 2, 3])
        );
        let V::ArrayValue(tags) = attr(&span.attributes, "tags") else {
            panic!()
        };
        assert_eq!(tags.values.len(), 2);
        let V::KvlistValue(nested) = attr(&span.attributes, "nested") else {
            panic!()
        };
        assert_eq!(attr(&nested.values, "x"), &V::IntValue(1));
        assert_eq!(span.events[0].time_unix_nano, 1_544_712_660_500_000_000);
        assert_eq!(span.events[0].name, "exception");
        assert_eq!(span.links[0].span_id[7], 0x75);
        assert_eq!(span.links[0].flags, 256);
        let status = span.status.as_ref().unwrap();
        assert_eq!((status.code, status.message.as_str()), (2, "boom"));
    }

    #[test]
    fn accepts_enum_names_numbers_as_numbers_and_snake_case_keys() {
        let json = r#"{"resource_spans":[{"scope_spans":[{"spans":[
            {"trace_id":"5B8EFFF798038103D269B633813FC60C","kind":"SPAN_KIND_CLIENT",
             "start_time_unix_nano":1544712660000000000,"end_time_unix_nano":"1544712660000000001",
             "status":{"code":"STATUS_CODE_ERROR"},
             "attributes":[{"key":"i","value":{"int_value":-42}},
                           {"key":"big","value":{"intValue":"-9223372036854775808"}},
                           {"key":"nan","value":{"doubleValue":"NaN"}},
                           {"key":"inf","value":{"doubleValue":"-Infinity"}},
                           {"key":"exp","value":{"doubleValue":1e-7}},
                           {"key":"url","value":{"bytesValue":"-_8"}},
                           {"key":"empty","value":{}},
                           {"key":"nullv","value":null}]}]}]}]}"#;
        let req = decode(json.as_bytes()).unwrap();
        let span = &req.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_id[0], 0x5b);
        assert_eq!(span.kind, SpanKind::Client as i32);
        assert_eq!(span.start_time_unix_nano, 1_544_712_660_000_000_000);
        assert_eq!(span.end_time_unix_nano, 1_544_712_660_000_000_001);
        assert_eq!(span.status.as_ref().unwrap().code, StatusCode::Error as i32);
        assert_eq!(attr(&span.attributes, "i"), &V::IntValue(-42));
        assert_eq!(attr(&span.attributes, "big"), &V::IntValue(i64::MIN));
        assert!(matches!(attr(&span.attributes, "nan"), V::DoubleValue(d) if d.is_nan()));
        assert_eq!(
            attr(&span.attributes, "inf"),
            &V::DoubleValue(f64::NEG_INFINITY)
        );
        assert_eq!(attr(&span.attributes, "exp"), &V::DoubleValue(1e-7));
        assert_eq!(
            attr(&span.attributes, "url"),
            &V::BytesValue(vec![0xfb, 0xff])
        );
        let empty = span.attributes.iter().find(|kv| kv.key == "empty").unwrap();
        assert_eq!(empty.value, Some(AnyValue { value: None }));
        let nullv = span.attributes.iter().find(|kv| kv.key == "nullv").unwrap();
        assert_eq!(nullv.value, None);
    }

    #[test]
    fn ignores_unknown_fields_and_reads_null_as_default() {
        let json = r#"{"resourceSpans":[{"resource":null,"future":{"a":[1,2]},
            "scopeSpans":[{"scope":null,"spans":[{"name":null,"events":null,"x":1}]}]}],
            "extra":true}"#;
        let req = decode(json.as_bytes()).unwrap();
        let rs = &req.resource_spans[0];
        assert!(rs.resource.is_none());
        assert_eq!(rs.scope_spans[0].spans[0], Span::default());
    }

    #[test]
    fn errors_name_the_field_that_failed() {
        let cases = [
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}"#,
                "traceId: invalid hex",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"abc"}]}]}]}"#,
                "spanId: invalid hex",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"kind":"SERVER"}]}]}]}"#,
                "kind: unknown enum value",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"startTimeUnixNano":"-1"}]}]}]}"#,
                "startTimeUnixNano: -1 is out of range",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"flags":4294967296}]}]}]}"#,
                "flags: 4294967296 is out of range",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":{"intValue":"1.5"}}]}]}]}]}"#,
                "intValue: \"1.5\" is not an integer",
            ),
            (
                r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":{"bytesValue":"%%"}}]}]}]}]}"#,
                "bytesValue: invalid base64",
            ),
            (
                r#"{"resourceSpans":{}}"#,
                "array of OTLP/JSON ResourceSpans",
            ),
            (r#"{"resourceSpans":[]} trailing"#, "trailing characters"),
        ];
        for (json, want) in cases {
            let err = decode(json.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(want), "{json}\n  got: {err}\n  want: {want}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let mut json = String::from(
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[{"key":"k","value":"#,
        );
        let depth = 5000;
        for _ in 0..depth {
            json.push_str(r#"{"arrayValue":{"values":["#);
        }
        for _ in 0..depth {
            json.push_str("]}}");
        }
        json.push_str("}]}]}]}]}");
        let err = decode(json.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("recursion limit"), "{err}");
    }
}
