//! The differential conformance test's parts: the edge-case records and the
//! column-by-column comparison of two traces tables.

pub mod cases;
pub mod compare;
