//! The differential conformance test's parts: the edge-case records and the
//! column-by-column comparison of two traces tables, and the OpenTelemetry Collector they
//! compare against.

pub mod cases;
pub mod compare;
pub mod otelcol;
