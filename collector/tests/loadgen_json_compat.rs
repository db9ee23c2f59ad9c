//! What the load generator writes as `otlp_json`, the collector's OTLP/JSON reader reads
//! back into the very same request (no stack needed).

use tracehouse_collector::decode::json;
use tracehouse_loadgen::{Encoding, Generator, GeneratorConfig, encode};

#[test]
fn collector_reads_generated_otlp_json_back_to_the_same_request() {
    let mut generator = Generator::new(GeneratorConfig {
        generator_id: "compat".into(),
        seed: 99,
        start_time_unix_nano: 1_700_000_000_000_000_000,
        ..GeneratorConfig::default()
    });
    for n in [1, 100, 1000] {
        let req = generator.next_request(n);
        let bytes = encode(&req, Encoding::OtlpJson);
        let back = json::decode(&bytes).expect("the collector decodes our OTLP/JSON");
        // Compare piece by piece first, so a failure names the part that differs.
        assert_eq!(back.resource_spans.len(), req.resource_spans.len());
        for (b, r) in back.resource_spans.iter().zip(&req.resource_spans) {
            assert_eq!(b.resource, r.resource);
            assert_eq!(b.scope_spans.len(), r.scope_spans.len());
            for (bs, rs) in b.scope_spans.iter().zip(&r.scope_spans) {
                assert_eq!(bs.scope, rs.scope);
                assert_eq!(bs.spans.len(), rs.spans.len());
                for (x, y) in bs.spans.iter().zip(&rs.spans) {
                    for (kx, ky) in x.attributes.iter().zip(&y.attributes) {
                        assert_eq!(kx, ky, "attribute differs");
                    }
                    assert_eq!(x.events, y.events, "events differ");
                    assert_eq!(x.links, y.links, "links differ");
                    assert_eq!(x, y, "span differs");
                }
            }
        }
        assert_eq!(
            back, req,
            "request of {n} spans differs after a JSON round trip"
        );
    }
}
