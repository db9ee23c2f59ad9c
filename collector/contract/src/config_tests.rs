//! Tests of the collector configuration: defaults, YAML round trips and validation.

use super::*;

fn field_of(e: ConfigError) -> &'static str {
    match e {
        ConfigError::Invalid { field, .. } => field,
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn defaults_are_valid() {
    Config::default().validate().unwrap();
}

#[test]
fn yaml_overrides_defaults_and_rejects_unknown_fields() {
    let c: Config = crate::yaml::from_str(
        "kafka: {brokers: 'a:1', topics: [x], encoding: otlp_json}\nclickhouse: {attributes: json}\n",
    )
    .unwrap();
    assert_eq!(c.kafka.encoding, Encoding::OtlpJson);
    assert_eq!(c.clickhouse.attributes, Attributes::Json);
    let c: Config = crate::yaml::from_str(
        "clickhouse: {tls: {ca_file: /ca.crt, insecure_skip_verify: true}}\n",
    )
    .unwrap();
    assert_eq!(
        c.clickhouse.tls.ca_file.as_deref(),
        Some(Path::new("/ca.crt"))
    );
    assert!(c.clickhouse.tls.insecure_skip_verify);
    assert_eq!(c.batch, BatchConfig::default());
    let err = crate::yaml::from_str::<Config>("kafka: {brokerz: 'a:1'}").unwrap_err();
    assert!(err.to_string().contains("brokerz"), "{err}");
}

#[test]
fn compression_is_lz4_unless_told_and_left_out_of_the_yaml_when_default() {
    assert_eq!(Config::default().clickhouse.compression, Compression::Lz4);
    let written = crate::yaml::to_string(&Config::default()).unwrap();
    assert!(!written.contains("compression"), "{written}");
    let c: Config = crate::yaml::from_str("clickhouse: {compression: none}\n").unwrap();
    assert_eq!(c.clickhouse.compression, Compression::None);
    assert!(
        crate::yaml::to_string(&c)
            .unwrap()
            .contains("compression: none")
    );
    let err = crate::yaml::from_str::<Config>("clickhouse: {compression: zstd}\n").unwrap_err();
    assert!(err.to_string().contains("zstd"), "{err}");
}

#[test]
fn validation_names_the_field() {
    let mut c = Config::default();
    c.kafka.topics = vec!["bad topic".into()];
    assert_eq!(field_of(c.validate().unwrap_err()), "kafka.topics");

    let mut c = Config::default();
    c.clickhouse.url = "localhost:8123".into();
    assert_eq!(field_of(c.validate().unwrap_err()), "clickhouse.url");

    let mut c = Config::default();
    c.clickhouse.table = "line\nbreak".into();
    assert_eq!(field_of(c.validate().unwrap_err()), "clickhouse.table");

    let mut c = Config::default();
    c.limits.max_inflight_bytes = 1024;
    assert_eq!(
        field_of(c.validate().unwrap_err()),
        "limits.max_inflight_bytes"
    );

    let mut c = Config::default();
    c.clickhouse.tls.client_cert_file = Some("/tls/tls.crt".into());
    assert_eq!(field_of(c.validate().unwrap_err()), "clickhouse.tls");

    let mut c = Config::default();
    c.kafka
        .properties
        .insert("enable.auto.commit".into(), "true".into());
    assert_eq!(field_of(c.validate().unwrap_err()), "kafka.properties");
}

#[test]
fn credentials_never_show_the_password() {
    let c = Credentials {
        user: "u".into(),
        password: "s3cret".into(),
    };
    assert!(!format!("{c:?}").contains("s3cret"));
}

/// A pipeline that raised `batch.max_bytes` past the default backlog cut is valid: its
/// batches simply never grow (the production sample's 32 MiB batches once failed here).
#[test]
fn a_max_bytes_above_the_default_backlog_cut_is_valid() {
    let mut c = Config::default();
    c.batch.max_bytes = 32 << 20;
    c.limits.max_inflight_bytes = 96 << 20;
    assert!(c.batch.backlog_max_bytes < c.batch.max_bytes);
    c.validate().unwrap();
}
