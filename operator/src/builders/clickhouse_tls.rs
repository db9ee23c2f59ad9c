//! The collector's ClickHouse TLS files implied by `spec.clickhouse.tls`: where the pods find
//! the mounted CA and client certificate. Secrets never appear here.

use tracehouse_contract::config::ClickHouseTlsConfig;

use crate::crd::TlsSpec;

/// Where the ClickHouse CA Secret is mounted in the collector container.
pub(super) const CLICKHOUSE_CA_DIR: &str = "/etc/tracehouse/clickhouse-tls/ca";
/// Where the ClickHouse client certificate Secret is mounted in the collector container.
pub(super) const CLICKHOUSE_CLIENT_CERT_DIR: &str = "/etc/tracehouse/clickhouse-tls/client";

/// The collector's `clickhouse.tls`: the mounted files' paths as the pods see them.
pub fn clickhouse_tls_files(tls: Option<&TlsSpec>) -> ClickHouseTlsConfig {
    let Some(tls) = tls else {
        return ClickHouseTlsConfig::default();
    };
    let client = tls.client_cert_secret_name.is_some();
    ClickHouseTlsConfig {
        ca_file: tls
            .ca
            .as_ref()
            .map(|_| format!("{CLICKHOUSE_CA_DIR}/ca.crt").into()),
        client_cert_file: client.then(|| format!("{CLICKHOUSE_CLIENT_CERT_DIR}/tls.crt").into()),
        client_key_file: client.then(|| format!("{CLICKHOUSE_CLIENT_CERT_DIR}/tls.key").into()),
        insecure_skip_verify: tls.insecure_skip_verify,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{collector_config, desired};
    use super::*;
    use crate::crd::fixtures::secured;

    #[test]
    fn clickhouse_tls_becomes_mounted_files_and_never_values() {
        let tp = secured();
        let cfg = collector_config(&tp).unwrap();
        assert_eq!(
            cfg.clickhouse.tls,
            ClickHouseTlsConfig {
                ca_file: Some(format!("{CLICKHOUSE_CA_DIR}/ca.crt").into()),
                client_cert_file: Some(format!("{CLICKHOUSE_CLIENT_CERT_DIR}/tls.crt").into()),
                client_key_file: Some(format!("{CLICKHOUSE_CLIENT_CERT_DIR}/tls.key").into()),
                insecure_skip_verify: false,
            }
        );
        let d = desired(&tp, 2).unwrap();
        let pod = d.deployment.spec.unwrap().template.spec.unwrap();
        let volumes: Vec<(String, String)> = pod
            .volumes
            .unwrap()
            .into_iter()
            .filter_map(|v| Some((v.name, v.secret?.secret_name?)))
            .collect();
        assert!(volumes.contains(&("clickhouse-ca".into(), "clickhouse-ca".into())));
        assert!(volumes.contains(&("clickhouse-client-cert".into(), "clickhouse-client".into())));
        assert_eq!(clickhouse_tls_files(None), ClickHouseTlsConfig::default());
    }
}
