//! Placeholder while the pipeline bench is written.
fn main() {}
