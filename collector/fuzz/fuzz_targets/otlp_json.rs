//! libFuzzer target: `otlp_json` records never panic the decoder
//! (`tracehouse_collector_fuzz::check_json`).
#![no_main]

use tracehouse_collector::decode::Encoding;

libfuzzer_sys::fuzz_target!(
    init: tracehouse_collector_fuzz::write_seeds(Encoding::OtlpJson),
    |data: &[u8]| tracehouse_collector_fuzz::check_json(data)
);
