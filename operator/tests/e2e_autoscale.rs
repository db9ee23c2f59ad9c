//! The autoscaler end to end, through the operator on the real local stack: a backlog waiting
//! on 8 partitions when the pipeline starts and a burst on top, which one replica cannot
//! drain within the lag target (whatever this machine's speeds) → the operator scales out
//! along the partition ladder (never above 8), the lag comes back under target, the load
//! stops → it scales back in after the stabilization window; every span lands exactly once
//! across the rebalances. And the other owner of the count: `spec.replicas.count`, written
//! through the scale subresource as an HPA or KEDA would, wins while it is set.
//!
//! Prints the figures of the run (time to scale out, peak lag, scale events, time to scale
//! in) for the closing notes.
#![cfg(feature = "stack-tests")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracehouse_e2e::{stack_var, unique_name};
use tracehouse_loadgen::{GeneratorConfig, ProduceOptions, produce, verify};
use tracehouse_operator::crd::TracePipeline;

const TARGET_LAG_SECONDS: i64 = 10;
const STABILIZATION_SECONDS: u64 = 45;

/// The local sample with its autoscaling block, tightened so the test runs in minutes.
fn autoscaled(ns: &str, topic: &str, database: &str) -> Value {
    let mut tp = sample(ns, topic, database);
    tp["spec"]["autoscaling"] = json!({
        "targetLagSeconds": TARGET_LAG_SECONDS,
        "min": 1,
        "max": 8,
        "lookbackSeconds": 20,
        "scaleDownStabilizationSeconds": STABILIZATION_SECONDS,
        "cooldownSeconds": 15,
        "maxStep": 2,
    });
    tp
}

/// One poll of what the test watches.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    replicas: i32,
    lag_seconds: Option<i64>,
}

/// The autoscaler's messages as they changed (the last 40), for a failure's message.
fn note_reason(reasons: &mut Vec<String>, reason: Option<String>) {
    if let Some(r) = reason
        && reasons.last() != Some(&r)
    {
        reasons.push(r);
        if reasons.len() > 40 {
            reasons.remove(0);
        }
    }
}

async fn seen(
    client: &Client,
    api: &Api<TracePipeline>,
    ns: &str,
    name: &str,
    reasons: &mut Vec<String>,
) -> Seen {
    let autoscaling = api
        .get(name)
        .await
        .ok()
        .and_then(|tp| tp.status?.autoscaling);
    note_reason(
        reasons,
        autoscaling
            .as_ref()
            .and_then(|a| a.message.clone().or(a.reason.clone())),
    );
    Seen {
        replicas: deployment_replicas(client, ns, name).await.unwrap_or(0),
        lag_seconds: autoscaling.and_then(|a| a.lag_seconds),
    }
}

/// `(reason, note)` of every ScaledUp/ScaledDown, once per occurrence (an Event series
/// counts its repeats).
fn scale_events(events: &[k8s_openapi::api::events::v1::Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| {
            let r = e.reason.clone()?;
            let times = e.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
            (r == "ScaledUp" || r == "ScaledDown")
                .then(|| vec![(r, e.note.clone().unwrap_or_default()); times])
        })
        .flatten()
        .collect()
}

/// Records of 50 spans of `generator_id`, as fast as the producer goes.
fn burst(topic: &str, generator_id: &str, seed: u64, spans: u64) -> ProduceOptions {
    ProduceOptions {
        brokers: stack_var("KAFKA_BROKERS"),
        topic: topic.to_owned(),
        spans,
        generator: GeneratorConfig {
            generator_id: generator_id.to_owned(),
            seed,
            spans_per_record: 50,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_scales_out_along_the_ladder_and_back_in_exactly_once() {
    in_namespace("tp-autoscale", |client, ns| async move {
        let topic = unique_name("tp_autoscale");
        let database = unique_name("tp_autoscale");
        create_topic(&topic, 8).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            // The burst, in two halves. The first waits in the topic before the pipeline
            // exists (a gateway starting on a backlog), so the lag is far above the target
            // whatever the speeds of producer and collector on this machine; the second
            // arrives while the gateway drains, as fast as the producer goes.
            let half: u64 = 1_000_000;
            let spans = 2 * half;
            let (backlog_id, live_id) = ("autoscale-backlog", "autoscale-burst");
            let started = Instant::now();
            let report = produce(&burst(&topic, backlog_id, 14, half))
                .await
                .expect("producing the backlog");
            assert_eq!(report.spans, half);
            apply(&api, &autoscaled(&ns, &topic, &database)).await;
            let live = burst(&topic, live_id, 15, half);
            let producer = tokio::spawn(async move { produce(&live).await });

            let (mut scaled_out, mut max_replicas, mut peak_lag) = (None, 1, 0i64);
            let mut produced_in = None;
            let mut drained = None;
            let mut reasons = Vec::new();
            let options = [backlog_id, live_id]
                .map(|id| verify_options(&database, id, half, Attributes::Map));
            let deadline = Duration::from_secs(600);
            let scaled_in = loop {
                assert!(
                    started.elapsed() < deadline,
                    "no scale-in back to 1 replica within {deadline:?}: scaled out at \
                     {scaled_out:?}, max {max_replicas}, lag back under target at {drained:?}; \
                     the autoscaler said, in order:\n  {}",
                    reasons.join("\n  ")
                );
                if produced_in.is_none() && producer.is_finished() {
                    produced_in = Some(started.elapsed());
                }
                let s = seen(&client, &api, &ns, name, &mut reasons).await;
                assert!(s.replicas <= 8, "{} replicas for 8 partitions", s.replicas);
                max_replicas = max_replicas.max(s.replicas);
                peak_lag = peak_lag.max(s.lag_seconds.unwrap_or(0));
                if scaled_out.is_none() && s.replicas > 1 {
                    scaled_out = Some(started.elapsed());
                }
                if scaled_out.is_some() && drained.is_none() && produced_in.is_some() {
                    // Every span in (duplicates are judged at the end).
                    let mut missing = 0;
                    for o in &options {
                        missing += verify(o).await.map_or(u64::MAX / 2, |r| r.missing());
                    }
                    if missing == 0 && s.lag_seconds.is_some_and(|l| l <= TARGET_LAG_SECONDS) {
                        drained = Some(started.elapsed());
                    }
                }
                if drained.is_some() && s.replicas == 1 {
                    break started.elapsed();
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            };
            let report = producer.await.unwrap().expect("producing the burst");
            assert_eq!(report.spans, half);

            let scaled_out = scaled_out.expect("scaled out");
            let drained = drained.expect("drained");
            assert!(
                scaled_in.saturating_sub(drained) >= Duration::from_secs(STABILIZATION_SECONDS / 2),
                "scaled in {scaled_in:?}, only {:?} after the lag was back under target: the \
                 stabilization window ({STABILIZATION_SECONDS}s) was not waited out",
                scaled_in.saturating_sub(drained)
            );
            let events = scale_events(&pipeline_events(&client, &ns, name).await);
            let ups = events.iter().filter(|(r, _)| r == "ScaledUp").count();
            let downs = events.len() - ups;
            assert!(ups >= 1 && downs >= 1, "{events:?}");
            assert!(
                events.len() <= 8,
                "flapping: {} scale events: {events:?}",
                events.len()
            );
            for (_, note) in &events {
                assert!(
                    note.contains("replicas"),
                    "an Event without its numbers: {note}"
                );
            }

            // Exactly once across every rebalance.
            for o in &options {
                let r = verify(o).await.expect("verify");
                assert!(r.is_exact(), "{}", serde_json::to_string(&r).unwrap());
            }

            let status = api.get(name).await.unwrap().status.unwrap();
            let a = status.autoscaling.expect("status.autoscaling");
            assert_eq!(a.desired_replicas, Some(1));
            assert!(
                a.last_scale_time.is_some() && a.last_scale_reason.is_some(),
                "{a:?}"
            );
            let (up_reasons, down_reasons) = (
                events
                    .iter()
                    .filter(|(r, _)| r == "ScaledUp")
                    .map(|(_, n)| n.as_str())
                    .collect::<Vec<_>>(),
                events
                    .iter()
                    .filter(|(r, _)| r == "ScaledDown")
                    .map(|(_, n)| n.as_str())
                    .collect::<Vec<_>>(),
            );
            eprintln!(
                "autoscale figures: {spans} spans produced in {:.1}s; first scale-out {:.1}s \
                 after the burst began; max {max_replicas} replicas; peak time lag {peak_lag}s \
                 (target {TARGET_LAG_SECONDS}s); lag back under target and every span in \
                 ClickHouse at {:.1}s; back to 1 replica at {:.1}s ({:.1}s after draining, \
                 stabilization {STABILIZATION_SECONDS}s); {} scale events ({ups} up, {downs} \
                 down)\n  up: {up_reasons:?}\n  down: {down_reasons:?}",
                produced_in.unwrap_or_default().as_secs_f64(),
                scaled_out.as_secs_f64(),
                drained.as_secs_f64(),
                scaled_in.as_secs_f64(),
                (scaled_in - drained).as_secs_f64(),
                events.len(),
            );
        })
        .await;
    })
    .await;
}

/// `spec.replicas.count` — what `kubectl scale tp`, an HPA or KEDA write through the scale
/// subresource — owns the count while it is set; the autoscaler only reports. Removing it
/// gives the count back to the autoscaler.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_scale_subresource_owns_the_count_while_it_is_set() {
    in_namespace("tp-scale", |client, ns| async move {
        let topic = unique_name("tp_scale");
        let database = unique_name("tp_scale");
        create_topic(&topic, 8).await;
        create_clickhouse_secret(&client, &ns).await;
        let api: Api<TracePipeline> = Api::namespaced(client.clone(), &ns);
        let name = "e2e";
        cleaning_up(&topic, &database, async {
            let spec = autoscaled(&ns, &topic, &database);
            apply(&api, &spec).await;
            wait_ready(&api, name, 8, 1, Duration::from_secs(180)).await;

            // An HPA's write: the scale subresource, not the Deployment.
            api.patch_scale(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": 3 } })),
            )
            .await
            .expect("patching the scale subresource");
            let tp = api.get(name).await.unwrap();
            assert_eq!(
                tp.spec.replicas.count,
                Some(3),
                "the subresource writes spec.replicas.count"
            );
            let scale = api.get_scale(name).await.unwrap();
            assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));

            // Exactly one owner: the count stays 3 over many autoscaler samples, and the
            // autoscaler says it is only reporting.
            wait_ready(&api, name, 8, 3, Duration::from_secs(120)).await;
            deliver(&topic, &database, "scale-subresource", 20_000).await;
            for _ in 0..15 {
                assert_eq!(deployment_replicas(&client, &ns, name).await, Some(3));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            let a = api
                .get(name)
                .await
                .unwrap()
                .status
                .unwrap()
                .autoscaling
                .unwrap();
            assert_eq!(a.reason.as_deref(), Some("ScaleSubresource"), "{a:?}");
            assert!(a.lag_records.is_some(), "the lag is still published: {a:?}");
            let events = scale_events(&pipeline_events(&client, &ns, name).await);
            assert!(
                events.is_empty(),
                "the autoscaler stepped while not the owner: {events:?}"
            );

            // Given back: the user's apply without `count` (it was never the user's field
            // manager's, so remove it explicitly) → the autoscaler owns the count again and
            // brings 3 (off the 8-partition ladder, and idle) back to a rung.
            api.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "replicas": { "count": null } } })),
            )
            .await
            .unwrap();
            wait_for(
                "the autoscaler to own the count again",
                Duration::from_secs(180),
                || async {
                    let a = api
                        .get(name)
                        .await
                        .map_err(|e| e.to_string())?
                        .status
                        .and_then(|s| s.autoscaling)
                        .ok_or("no status.autoscaling")?;
                    let replicas = deployment_replicas(&client, &ns, name).await;
                    match (a.reason.as_deref(), replicas) {
                        (Some(r), Some(n))
                            if r != "ScaleSubresource" && [1, 2, 4, 8].contains(&n) =>
                        {
                            Ok(())
                        }
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await;
        })
        .await;
    })
    .await;
}
