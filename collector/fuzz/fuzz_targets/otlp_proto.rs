//! libFuzzer target: `otlp_proto` records, the in-place reader against `prost`
//! (`tracehouse_collector_fuzz::check_proto`).
#![no_main]

use tracehouse_collector::decode::Encoding;

libfuzzer_sys::fuzz_target!(
    init: tracehouse_collector_fuzz::write_seeds(Encoding::OtlpProto),
    |data: &[u8]| tracehouse_collector_fuzz::check_proto(data)
);
