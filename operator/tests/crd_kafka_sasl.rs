//! The API server's own checks of `spec.kafka.sasl` (the CRD's CEL rules), on the stack's
//! kube-apiserver with server-side dry runs (nothing is stored): OAUTHBEARER needs `oauth` and
//! takes no `credentials`, PLAIN and SCRAM need `credentials` and take no `oauth`, the token
//! endpoint is a URL and no extension is `auth` — each refusal naming its field.
#![cfg(feature = "stack-tests")]

use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tracehouse_e2e::k8s::client;
use tracehouse_operator::crd::TracePipeline;

fn pipeline(name: &str, sasl: Value) -> TracePipeline {
    serde_json::from_value(json!({
        "apiVersion": "tracehouse.dev/v1alpha1",
        "kind": "TracePipeline",
        "metadata": { "name": name },
        "spec": {
            "kafka": { "bootstrapServers": "kafka:9093", "tls": {}, "sasl": sasl },
            "clickhouse": { "endpoint": "http://clickhouse:8123" }
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn the_api_server_names_every_missing_or_misplaced_sasl_setting() {
    let api: Api<TracePipeline> = Api::namespaced(client().await, "default");
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let oauth = json!({
        "tokenEndpoint": "https://login.example.com/oauth2/token",
        "credentials": { "name": "kafka-oauth" },
        "extensions": { "logicalCluster": "lkc-12345", "identityPoolId": "pool-AbCd" }
    });
    for (name, sasl) in [
        (
            "oauth",
            json!({ "mechanism": "OAUTHBEARER", "oauth": oauth }),
        ),
        (
            "scram",
            json!({ "mechanism": "SCRAM-SHA-512", "credentials": { "name": "kafka-scram" } }),
        ),
    ] {
        api.create(&dry_run, &pipeline(name, sasl))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let refused = [
        (
            json!({ "mechanism": "OAUTHBEARER" }),
            "spec.kafka.sasl.oauth is required when spec.kafka.sasl.mechanism is OAUTHBEARER",
        ),
        (
            json!({ "mechanism": "OAUTHBEARER", "oauth": oauth, "credentials": { "name": "x" } }),
            "spec.kafka.sasl.credentials is not read with OAUTHBEARER",
        ),
        (
            json!({ "mechanism": "PLAIN" }),
            "spec.kafka.sasl.credentials is required when spec.kafka.sasl.mechanism is PLAIN",
        ),
        (
            json!({ "mechanism": "SCRAM-SHA-256", "credentials": { "name": "x" }, "oauth": oauth }),
            "spec.kafka.sasl.oauth is only for spec.kafka.sasl.mechanism OAUTHBEARER",
        ),
        (
            json!({ "mechanism": "OAUTHBEARER", "oauth": {
                "tokenEndpoint": "login.example.com/token", "credentials": { "name": "s" } } }),
            "spec.kafka.sasl.oauth.tokenEndpoint must start with https://",
        ),
        (
            json!({ "mechanism": "OAUTHBEARER", "oauth": {
                "tokenEndpoint": "https://idp/token", "credentials": { "name": "s" },
                "extensions": { "auth": "x" } } }),
            "spec.kafka.sasl.oauth.extensions must not set `auth`",
        ),
    ];
    for (sasl, message) in refused {
        let err = api
            .create(&dry_run, &pipeline("refused", sasl.clone()))
            .await
            .expect_err(message);
        let kube::Error::Api(status) = &err else {
            panic!("{sasl}: expected an API error, got {err}");
        };
        assert_eq!(status.code, 422, "{status:?}");
        assert!(
            status.message.contains(message),
            "{message:?} not in: {}",
            status.message
        );
    }
}
