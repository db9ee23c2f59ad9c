//! ClickHouse data types, as a value the DDL renders and the row encoder matches on.
//!
//! The rendered form is exactly what the server reports in `system.columns.type` and
//! `DESCRIBE TABLE`, so a type read back from the server parses into an equal value
//! and comparisons never depend on spacing.

use std::fmt;
use std::str::FromStr;

/// The ClickHouse types this schema uses (and the few the encoder may meet besides).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ClickHouseType {
    String,
    UInt8,
    UInt32,
    UInt64,
    Int64,
    Float64,
    Bool,
    /// Seconds since the epoch, UTC (`DateTime`).
    DateTime,
    /// Ticks of 10^-precision seconds since the epoch (`DateTime64(9)`: nanoseconds).
    DateTime64(u8),
    LowCardinality(Box<ClickHouseType>),
    Array(Box<ClickHouseType>),
    Map(Box<ClickHouseType>, Box<ClickHouseType>),
    /// The `JSON` object type (dynamic paths, no declared sub-columns).
    Json,
}

impl ClickHouseType {
    /// `LowCardinality(String)`.
    pub fn low_cardinality_string() -> Self {
        Self::LowCardinality(Box::new(Self::String))
    }

    /// `Array(inner)`.
    pub fn array(inner: Self) -> Self {
        Self::Array(Box::new(inner))
    }

    /// `Map(key, value)`.
    pub fn map(key: Self, value: Self) -> Self {
        Self::Map(Box::new(key), Box::new(value))
    }

    /// The element type if this is an `Array`.
    pub fn array_element(&self) -> Option<&Self> {
        match self {
            Self::Array(inner) => Some(inner),
            _ => None,
        }
    }
}

impl fmt::Display for ClickHouseType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::String => f.write_str("String"),
            Self::UInt8 => f.write_str("UInt8"),
            Self::UInt32 => f.write_str("UInt32"),
            Self::UInt64 => f.write_str("UInt64"),
            Self::Int64 => f.write_str("Int64"),
            Self::Float64 => f.write_str("Float64"),
            Self::Bool => f.write_str("Bool"),
            Self::DateTime => f.write_str("DateTime"),
            Self::DateTime64(p) => write!(f, "DateTime64({p})"),
            Self::LowCardinality(t) => write!(f, "LowCardinality({t})"),
            Self::Array(t) => write!(f, "Array({t})"),
            // The server prints map arguments separated by ", ".
            Self::Map(k, v) => write!(f, "Map({k}, {v})"),
            Self::Json => f.write_str("JSON"),
        }
    }
}

/// A type string this crate does not model (for example `Nullable(String)`), kept
/// verbatim for the error message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported or malformed ClickHouse type {0:?}")]
pub struct UnknownType(pub String);

impl FromStr for ClickHouseType {
    type Err = UnknownType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || UnknownType(s.to_string());
        let mut p = Parser { rest: s.trim() };
        let t = p.parse().ok_or_else(err)?;
        if p.rest.trim().is_empty() {
            Ok(t)
        } else {
            Err(err())
        }
    }
}

/// Recursive-descent reader for the grammar `Name | Name(args)`.
struct Parser<'a> {
    rest: &'a str,
}

impl Parser<'_> {
    fn parse(&mut self) -> Option<ClickHouseType> {
        self.skip_ws();
        let end = self
            .rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest.len());
        let name = &self.rest[..end];
        self.rest = &self.rest[end..];
        use ClickHouseType as T;
        let simple = match name {
            "String" => Some(T::String),
            "UInt8" => Some(T::UInt8),
            "UInt32" => Some(T::UInt32),
            "UInt64" => Some(T::UInt64),
            "Int64" => Some(T::Int64),
            "Float64" => Some(T::Float64),
            "Bool" => Some(T::Bool),
            "JSON" => Some(T::Json),
            _ => None,
        };
        if let Some(t) = simple {
            return Some(t);
        }
        match name {
            // `DateTime` may carry a time zone argument; the schema never sets one.
            "DateTime" if !self.rest.trim_start().starts_with('(') => Some(T::DateTime),
            "DateTime64" => {
                self.expect('(')?;
                self.skip_ws();
                let end = self.rest.find(|c: char| !c.is_ascii_digit())?;
                let precision = self.rest[..end].parse().ok()?;
                self.rest = &self.rest[end..];
                self.expect(')')?;
                Some(T::DateTime64(precision))
            }
            "LowCardinality" | "Array" => {
                self.expect('(')?;
                let inner = Box::new(self.parse()?);
                self.expect(')')?;
                Some(if name == "Array" {
                    T::Array(inner)
                } else {
                    T::LowCardinality(inner)
                })
            }
            "Map" => {
                self.expect('(')?;
                let k = self.parse()?;
                self.expect(',')?;
                let v = self.parse()?;
                self.expect(')')?;
                Some(T::map(k, v))
            }
            _ => None,
        }
    }

    fn skip_ws(&mut self) {
        self.rest = self.rest.trim_start();
    }

    fn expect(&mut self, c: char) -> Option<()> {
        self.skip_ws();
        self.rest = self.rest.strip_prefix(c)?;
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::ClickHouseType as T;

    #[test]
    fn renders_the_servers_spelling() {
        let attrs = T::map(T::low_cardinality_string(), T::String);
        assert_eq!(attrs.to_string(), "Map(LowCardinality(String), String)");
        assert_eq!(
            T::array(attrs).to_string(),
            "Array(Map(LowCardinality(String), String))"
        );
        assert_eq!(
            T::array(T::DateTime64(9)).to_string(),
            "Array(DateTime64(9))"
        );
        assert_eq!(T::array(T::Json).to_string(), "Array(JSON)");
    }

    #[test]
    fn parses_what_it_renders_and_tolerates_spacing() {
        for s in [
            "String",
            "UInt64",
            "DateTime",
            "DateTime64(9)",
            "JSON",
            "LowCardinality(String)",
            "Array(LowCardinality(String))",
            "Map(LowCardinality(String), String)",
            "Array(Map(LowCardinality(String), String))",
            "Array(DateTime64(9))",
            "Array(JSON)",
        ] {
            let t: T = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
        }
        let spaced: T = " Map( LowCardinality( String ) ,String ) ".parse().unwrap();
        assert_eq!(spaced, T::map(T::low_cardinality_string(), T::String));
    }

    #[test]
    fn rejects_types_outside_the_model() {
        for s in [
            "",
            "Nullable(String)",
            "DateTime('UTC')",
            "JSON(max_dynamic_paths = 256)",
            "Array(String",
            "String)",
            "Map(String)",
            "DateTime64(x)",
        ] {
            assert!(s.parse::<T>().is_err(), "{s:?} parsed");
        }
    }
}
