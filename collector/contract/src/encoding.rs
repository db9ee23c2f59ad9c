//! How a record's payload is encoded on the topic.

use std::fmt;
use std::str::FromStr;

/// How a record's payload is encoded (the exporter's `encoding` setting; also the
/// collector's `kafka.encoding` configuration value and `--encoding` flag, a
/// `TracePipeline`'s `spec.kafka.encoding` and the load generator's `--encoding`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Encoding {
    /// Protobuf `ExportTraceServiceRequest` (the exporter's default).
    #[default]
    OtlpProto,
    /// OTLP/JSON `ExportTraceServiceRequest`.
    OtlpJson,
}

impl Encoding {
    /// The exporter's spelling: `otlp_proto` / `otlp_json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OtlpProto => "otlp_proto",
            Self::OtlpJson => "otlp_json",
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An encoding name other than `otlp_proto` / `otlp_json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace encoding {0:?}: expected otlp_proto or otlp_json")]
pub struct UnknownEncoding(pub String);

impl FromStr for Encoding {
    type Err = UnknownEncoding;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "otlp_proto" => Ok(Self::OtlpProto),
            "otlp_json" => Ok(Self::OtlpJson),
            other => Err(UnknownEncoding(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_names_parse_like_the_exporter_spells_them() {
        assert_eq!(
            "otlp_proto".parse::<Encoding>().unwrap(),
            Encoding::OtlpProto
        );
        assert_eq!("otlp_json".parse::<Encoding>().unwrap(), Encoding::OtlpJson);
        assert!("otlp_protobuf".parse::<Encoding>().is_err());
        assert_eq!(Encoding::OtlpJson.to_string(), "otlp_json");
    }
}
