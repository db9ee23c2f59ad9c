//! Decode: one Kafka record's bytes → an OTLP `ExportTraceServiceRequest`.
//!
//! Two encodings, as the OpenTelemetry Collector's kafka exporter writes them:
//! `otlp_proto` (the protobuf message, decoded by `prost` through the generated types
//! of `opentelemetry-proto`) and `otlp_json` (the OTLP/JSON mapping, decoded by
//! [`json`]: hex ids, 64-bit integers as strings or numbers, enums as names or numbers).
//!
//! The encoder reads `otlp_proto` records in place with [`proto`] and uses [`decode`]
//! (`prost`) only for records in an unusual shape and for `otlp_json`; see
//! `crate::encode::Encoder::push_record`.
//!
//! The record-size limit is the caller's check (it knows the size before copying the
//! payload); [`check_size`] and [`DecodeError::TooLarge`] give it the same error type.

pub mod json;
pub mod proto;

pub use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

/// How a record's payload is encoded: the operator ↔ collector contract's definition.
pub use tracehouse_contract::{Encoding, UnknownEncoding};

/// Why a record could not be turned into spans. A record that fails is skipped whole:
/// no span of it reaches the encoder.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The payload is over the configured record-size limit (checked by the caller
    /// before decoding, see [`check_size`]).
    #[error("record of {size} bytes is over the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    /// Not a protobuf `ExportTraceServiceRequest` (truncated, wrong message, invalid
    /// UTF-8 in a string field, nesting deeper than prost's limit of 100, …).
    #[error("invalid otlp_proto ExportTraceServiceRequest: {0}")]
    Proto(#[from] prost::DecodeError),
    /// Not an OTLP/JSON `ExportTraceServiceRequest`; the message names the field and
    /// the line and column.
    #[error("invalid otlp_json ExportTraceServiceRequest: {0}")]
    Json(#[from] serde_json::Error),
    /// The fast reader refused `prost`'s own re-encoding of a decoded record. Never
    /// expected (a bug); the record is kept out of the batch like any undecodable one.
    #[error("internal error: the re-encoded ExportTraceServiceRequest could not be read")]
    Reencoded,
    /// A valid record whose rows take more than `limits.max_expanded_record_bytes`
    /// (every span row repeats its resource's attributes).
    #[error(
        "the record's rows take {bytes} bytes or more, over limits.max_expanded_record_bytes = {limit} \
         (spans × their resource's attributes)"
    )]
    Expanded { bytes: usize, limit: usize },
}

impl DecodeError {
    /// A low-cardinality label for metrics and skip records.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::TooLarge { .. } => "too_large",
            Self::Proto(_) => "invalid_proto",
            Self::Json(_) => "invalid_json",
            Self::Reencoded => "reencoded",
            Self::Expanded { .. } => "expanded",
        }
    }
}

/// `Err(TooLarge)` when `size` exceeds `limit` bytes.
pub fn check_size(size: usize, limit: usize) -> Result<(), DecodeError> {
    if size > limit {
        Err(DecodeError::TooLarge { size, limit })
    } else {
        Ok(())
    }
}

/// Decodes one record payload.
pub fn decode(bytes: &[u8], encoding: Encoding) -> Result<ExportTraceServiceRequest, DecodeError> {
    match encoding {
        Encoding::OtlpProto => Ok(ExportTraceServiceRequest::decode(bytes)?),
        Encoding::OtlpJson => Ok(json::decode(bytes)?),
    }
}

/// Number of spans in a request (for metrics and batch accounting).
pub fn span_count(req: &ExportTraceServiceRequest) -> usize {
    req.resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .map(|ss| ss.spans.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn request() -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![
                        Span {
                            name: "a".into(),
                            trace_id: vec![1; 16],
                            ..Default::default()
                        },
                        Span {
                            name: "b".into(),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    #[test]
    fn proto_round_trips_through_prost() {
        let req = request();
        let bytes = req.encode_to_vec();
        let back = decode(&bytes, Encoding::OtlpProto).unwrap();
        assert_eq!(back, req);
        assert_eq!(span_count(&back), 2);
    }

    #[test]
    fn truncated_proto_is_a_proto_error() {
        let bytes = request().encode_to_vec();
        let err = decode(&bytes[..bytes.len() - 3], Encoding::OtlpProto).unwrap_err();
        assert_eq!(err.kind(), "invalid_proto");
        assert!(err.to_string().starts_with("invalid otlp_proto"), "{err}");
    }

    #[test]
    fn size_limit_error_names_both_sizes() {
        assert!(check_size(10, 10).is_ok());
        let err = check_size(11, 10).unwrap_err();
        assert_eq!(err.kind(), "too_large");
        assert_eq!(
            err.to_string(),
            "record of 11 bytes is over the 10-byte limit"
        );
    }
}
