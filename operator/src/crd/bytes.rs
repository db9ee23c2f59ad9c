//! A byte size as Kubernetes users write one: a plain integer (`536870912`) or a quantity
//! (`512Mi`, `1.5Gi`, `64M`, `2e6`) — the same grammar as container resources.
//!
//! The spec keeps what the user wrote (so it reads back as written); [`ByteSize::bytes`] is
//! the number. The CRD declares the field `x-kubernetes-int-or-string`; CEL rules check the
//! grammar (`isQuantity`) and compare sizes in both forms (`quantity(…).asInteger()`).

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::quantity::quantity;

/// A size in bytes, written as an integer or a quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteSize {
    Int(i64),
    Quantity(String),
}

impl ByteSize {
    /// The size in bytes; `None` when a quantity is not a whole, non-negative number of
    /// bytes that fits an `i64` (`1500m`, `-1Ki`).
    pub fn bytes(&self) -> Option<i64> {
        match self {
            Self::Int(n) => Some(*n).filter(|n| *n >= 0),
            Self::Quantity(q) => {
                let nanos = quantity(q)?;
                if nanos < 0 || nanos % 1_000_000_000 != 0 {
                    return None;
                }
                i64::try_from(nanos / 1_000_000_000).ok()
            }
        }
    }
}

impl From<i64> for ByteSize {
    fn from(n: i64) -> Self {
        Self::Int(n)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(n) => write!(f, "{n}"),
            Self::Quantity(q) => f.write_str(q),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Int(n) => s.serialize_i64(*n),
            Self::Quantity(q) => s.serialize_str(q),
        }
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Str(String),
        }
        let size = match Raw::deserialize(d)? {
            Raw::Int(n) => Self::Int(n),
            Raw::Str(s) => Self::Quantity(s),
        };
        if size.bytes().is_none() {
            return Err(serde::de::Error::custom(format!(
                "{size} is not a whole number of bytes (an integer or a quantity such as 512Mi)"
            )));
        }
        Ok(size)
    }
}

impl JsonSchema for ByteSize {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The grammar is checked by CEL (`isQuantity`, in the rules of the objects holding
        // sizes): inside `anyOf` a string pattern would never be enforced.
        json_schema!({ "x-kubernetes-int-or-string": true })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<ByteSize, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn integers_and_quantities_give_the_same_bytes() {
        let cases = [
            (serde_json::json!(536_870_912), 536_870_912),
            (serde_json::json!("512Mi"), 536_870_912),
            (serde_json::json!("1.5Ki"), 1_536),
            (serde_json::json!("64M"), 64_000_000),
            (serde_json::json!("2e6"), 2_000_000),
            (serde_json::json!("1024"), 1_024),
        ];
        for (v, bytes) in cases {
            assert_eq!(parse(v.clone()).unwrap().bytes(), Some(bytes), "{v}");
        }
    }

    #[test]
    fn fractions_of_a_byte_and_nonsense_are_refused() {
        for v in ["1500m", "0.5", "12x", "", "-1Ki"] {
            assert!(parse(serde_json::json!(v)).is_err(), "{v}");
        }
        assert!(parse(serde_json::json!(-1)).is_err());
    }

    #[test]
    fn what_the_user_wrote_reads_back_as_written() {
        let q = parse(serde_json::json!("512Mi")).unwrap();
        assert_eq!(serde_json::to_value(&q).unwrap(), "512Mi");
        let n = parse(serde_json::json!(4096)).unwrap();
        assert_eq!(serde_json::to_value(&n).unwrap(), 4096);
    }
}
