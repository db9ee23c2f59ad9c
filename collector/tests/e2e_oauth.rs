//! OAUTHBEARER on the stack: the collector takes OIDC client-credentials tokens from the
//! stand-in provider (`e2e/oidc`, over HTTPS trusted through the stack's CA, its tokens signed
//! with the key the broker's secured validator checks) and consumes, inserts and dead-letters
//! through the broker's SASL_SSL listener: every span stored once, a poison record's copy
//! produced, the short-lived token refreshed while it runs. A wrong client secret stops the
//! collector at start, naming the token endpoint and its HTTP status.
#![cfg(feature = "stack-tests")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use tracehouse_e2e::oidc::{OidcProvider, write_private};
use tracehouse_e2e::unique_name;

const CLIENT_ID: &str = "tracehouse-collector";

/// The client's files and configuration, removed when the test ends.
struct ClientFiles {
    dir: PathBuf,
    config: PathBuf,
}

impl ClientFiles {
    /// A collector configuration for OAUTHBEARER against `token_endpoint` with `secret`.
    fn new(token_endpoint: &str, secret: &str) -> Self {
        let dir = std::env::temp_dir().join(unique_name("oauth-client"));
        std::fs::create_dir(&dir).unwrap();
        write_private(&dir.join("client-id"), &format!("{CLIENT_ID}\n"));
        write_private(&dir.join("client-secret"), &format!("{secret}\n"));
        let ca = var("TRACEHOUSE_CA_FILE");
        let config = dir.join("collector.yaml");
        let yaml = format!(
            "# Stack test e2e_oauth: OAUTHBEARER with the stand-in provider.\n\
             kafka:\n\
             \x20 properties:\n\
             \x20   security.protocol: SASL_SSL\n\
             \x20   sasl.mechanism: OAUTHBEARER\n\
             \x20   ssl.ca.location: {ca}\n\
             \x20 oauth:\n\
             \x20   token_endpoint: {token_endpoint}\n\
             \x20   client_id_file: {id}\n\
             \x20   client_secret_file: {secret}\n\
             \x20   scope: kafka\n\
             \x20   extensions: {{logicalCluster: lkc-local}}\n\
             \x20   ca_file: {ca}\n\
             batch:\n\
             \x20 linger_ms: 200\n",
            id = dir.join("client-id").display(),
            secret = dir.join("client-secret").display(),
        );
        std::fs::write(&config, yaml).unwrap();
        Self { dir, config }
    }

    fn config(&self) -> &Path {
        &self.config
    }
}

impl Drop for ClientFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_move_exactly_once_through_oauthbearer_while_the_token_is_refreshed() {
    // Tokens live 15 s: the collector fetches a new one about 12 s in.
    let idp = OidcProvider::start(CLIENT_ID, "the-client-secret", 15);
    let files = ClientFiles::new(&idp.url, "the-client-secret");
    let w = World::new("oauth", Attributes::Map);
    let dlq = format!("{}_dlq", w.topic);
    w.produce(3_000, 2, 11).await;
    w.produce_raw(0, &[b"\xff\xff not protobuf".to_vec()]).await;
    let brokers = var("KAFKA_SASL_SSL_BROKERS");
    let config = files.config().to_str().unwrap();
    let c = w.start_collector(&[
        "--config",
        config,
        "--kafka-brokers",
        &brokers,
        "--dead-letter-topic",
        &dlq,
    ]);
    let rows = w.wait_rows(3_000, Duration::from_secs(90)).await;
    assert_eq!(rows, 3_000, "log:\n{}", c.log_tail());
    // The poison record's copy went out through the producer's own OAUTHBEARER connection.
    c.wait_metrics(
        "the poison record dead-lettered",
        Duration::from_secs(30),
        |m| sum_metric(m, "tracehouse_records_dead_lettered_total") == 1.0,
    )
    .await;

    // Past the first token's refresh, the clients still work: more spans go in.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while idp.issued() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no second token; log:\n{}",
            c.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let later = format!("{}_later", w.generator);
    w.produce_as(&later, 1_000, 2, 12).await;
    let rows = w.wait_rows(4_000, Duration::from_secs(60)).await;
    assert_eq!(rows, 4_000, "log:\n{}", c.log_tail());
    let (first, second) = (w.verify(3_000).await, w.verify_as(&later, 1_000).await);
    assert!(
        first.is_exact() && second.is_exact(),
        "{first:?} {second:?}"
    );
    assert_eq!(idp.refused(), 0);
    let log = std::fs::read_to_string(&c.log).unwrap();
    assert!(
        log.contains("OAUTHBEARER token fetched"),
        "{}",
        c.log_tail()
    );
    assert!(!log.contains("token refresh failed"), "{}", c.log_tail());
    assert!(!log.contains("the-client-secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_stops_the_collector_naming_the_endpoint_and_the_status() {
    let idp = OidcProvider::start(CLIENT_ID, "the-client-secret", 300);
    let files = ClientFiles::new(&idp.url, "not-the-secret");
    let w = World::new("oauthbad", Attributes::Map);
    let brokers = var("KAFKA_SASL_SSL_BROKERS");
    let config = files.config().to_str().unwrap();
    let mut c = w.start_collector(&["--config", config, "--kafka-brokers", &brokers]);
    let (_, status) = c
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the collector kept running; log:\n{}", c.log_tail()));
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(&c.log).unwrap();
    let expected = format!(
        "kafka.oauth: the token endpoint {} answered HTTP 401 Unauthorized: invalid_client: client authentication failed",
        idp.url
    );
    assert!(log.contains(&expected), "{expected:?} not in:\n{log}");
    assert!(!log.contains("not-the-secret"), "{log}");
    // The provider's log is read as it comes.
    for _ in 0..20 {
        if idp.refused() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!((idp.issued(), idp.refused()), (0, 1));
}
