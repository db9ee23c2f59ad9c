//! The scalar fields of OTLP/JSON, each a serde seed that takes every spelling the
//! OpenTelemetry Collector's reader takes (see the parent module): object keys, strings, hex
//! ids, integers of any width as numbers or strings, doubles with their special names, bools,
//! base64 bytes, enums by number or name.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

/// An object key, borrowed from the input when it has no escapes.
pub(super) struct Key<'de>(pub(super) Cow<'de, str>);

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
pub(super) struct Str;

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
pub(super) struct Hex(pub(super) &'static str);

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

pub(super) fn decode_hex(s: &[u8]) -> Option<Vec<u8>> {
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
pub(super) struct Int<T>(pub(super) &'static str, pub(super) PhantomData<T>);

pub(super) fn int<T>(field: &'static str) -> Int<T> {
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
pub(super) struct Double;

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
pub(super) struct Bool;

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
pub(super) struct Base64;

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
pub(super) struct Enum {
    pub(super) field: &'static str,
    pub(super) by_name: fn(&str) -> Option<i32>,
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
