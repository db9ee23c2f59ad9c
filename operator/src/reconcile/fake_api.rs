//! Test support: an in-process stand-in for the API server and the backends, so a whole
//! reconcile runs in milliseconds without a stack (kube-rs's controller-rs tests its
//! reconciler the same way, through a mocked `tower` service under `kube::Client`).
//!
//! The fake API server keeps objects by path: GET returns what is stored (404 otherwise;
//! pod and Event lists not stored are empty), a server-side apply stores the body as the object (a
//! `/status` apply replaces only the status), POST stores what it gets. Every request and
//! every backend call is appended to one journal, in order, so tests assert sequences.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use kube::Client;
use serde_json::{Value, json};

use super::backends::{Backends, Brokers, SchemaRequest};
use crate::autoscale::PodMetricsSource;
use crate::kafka::{KafkaError, PartitionOffsets};
use crate::schema_step::SchemaOutcome;

/// The API server's objects and the journal of everything asked of the world.
#[derive(Default)]
pub struct World {
    objects: Mutex<BTreeMap<String, Value>>,
    journal: Mutex<Vec<String>>,
    resource_version: Mutex<u64>,
    /// What `partitions` answers: `None` → 4 partitions per topic.
    pub kafka_failure: Mutex<Option<fn() -> KafkaError>>,
    /// `(committed, end)` of every partition `offsets` answers for.
    pub offsets: Mutex<(i64, i64)>,
    /// What `oldest_unconsumed` answers (ms since the epoch).
    pub oldest: Mutex<Option<i64>>,
    /// The /metrics text of each pod IP; a pod not here refuses the scrape.
    pub pod_metrics: Mutex<BTreeMap<String, String>>,
}

impl World {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A `kube::Client` whose every request this world answers.
    pub fn client(self: &Arc<Self>) -> Client {
        let world = self.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let world = world.clone();
            async move { Ok::<_, Infallible>(world.answer(req).await) }
        });
        Client::new(service, "default")
    }

    pub fn put(&self, path: &str, object: Value) {
        self.objects.lock().unwrap().insert(path.to_owned(), object);
    }

    pub fn get(&self, path: &str) -> Option<Value> {
        self.objects.lock().unwrap().get(path).cloned()
    }

    /// `(type, reason)` of every Event published, in name order.
    pub fn events(&self) -> Vec<(String, String)> {
        self.objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(path, _)| path.starts_with("/apis/events.k8s.io/"))
            .map(|(_, e)| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (text("type"), text("reason"))
            })
            .collect()
    }

    /// Everything asked since the last call, and forget it.
    pub fn take_journal(&self) -> Vec<String> {
        std::mem::take(&mut *self.journal.lock().unwrap())
    }

    fn note(&self, entry: String) {
        self.journal.lock().unwrap().push(entry);
    }

    fn next_version(&self) -> String {
        let mut v = self.resource_version.lock().unwrap();
        *v += 1;
        v.to_string()
    }

    async fn answer(&self, req: Request<kube::client::Body>) -> Response<Full<Bytes>> {
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let body: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&body).unwrap()
        };
        self.note(format!("{method} {path}"));
        match method {
            Method::GET => match self.get(&path) {
                Some(object) => respond(StatusCode::OK, &object),
                None if path.ends_with("/pods") || path.ends_with("/events") => respond(
                    StatusCode::OK,
                    &json!({ "apiVersion": "v1", "kind": "List", "metadata": {}, "items": [] }),
                ),
                None => not_found(&path),
            },
            Method::PATCH if path.ends_with("/status") => {
                let object_path = path.trim_end_matches("/status");
                let Some(mut object) = self.get(object_path) else {
                    return not_found(object_path);
                };
                object["status"] = body["status"].clone();
                object["metadata"]["resourceVersion"] = json!(self.next_version());
                self.put(object_path, object.clone());
                respond(StatusCode::OK, &object)
            }
            Method::PATCH | Method::POST => {
                let object_path = if method == Method::POST {
                    format!("{path}/{}", body["metadata"]["name"].as_str().unwrap())
                } else {
                    path
                };
                let mut object = body;
                object["metadata"]["resourceVersion"] = json!(self.next_version());
                self.put(&object_path, object.clone());
                respond(StatusCode::OK, &object)
            }
            other => panic!("the fake API server does not answer {other} {path}"),
        }
    }
}

fn respond(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

fn not_found(path: &str) -> Response<Full<Bytes>> {
    respond(
        StatusCode::NOT_FOUND,
        &json!({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "message": format!("{path} not found"), "reason": "NotFound", "code": 404
        }),
    )
}

impl Backends for World {
    fn partitions<'a>(
        &'a self,
        _brokers: Brokers<'a>,
        topics: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeMap<String, i32>, KafkaError>> {
        self.note(format!("kafka partitions {}", topics.join(",")));
        let result = match *self.kafka_failure.lock().unwrap() {
            Some(failure) => Err(failure()),
            None => Ok(topics.iter().map(|t| (t.clone(), 4)).collect()),
        };
        futures::future::ready(result).boxed()
    }

    fn dead_letter_topic<'a>(
        &'a self,
        _brokers: Brokers<'a>,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<(), KafkaError>> {
        self.note(format!("kafka dead-letter topic {topic}"));
        futures::future::ready(Ok(())).boxed()
    }

    fn offsets<'a>(
        &'a self,
        brokers: Brokers<'a>,
        counts: &'a BTreeMap<String, i32>,
    ) -> BoxFuture<'a, Result<Vec<PartitionOffsets>, KafkaError>> {
        self.note(format!("kafka offsets {}", brokers.group));
        let (committed, end) = *self.offsets.lock().unwrap();
        let offsets = counts
            .iter()
            .flat_map(|(topic, &n)| {
                (0..n).map(move |partition| PartitionOffsets {
                    topic: topic.clone(),
                    partition,
                    committed,
                    end,
                })
            })
            .collect();
        futures::future::ready(Ok(offsets)).boxed()
    }

    fn oldest_unconsumed<'a>(
        &'a self,
        brokers: Brokers<'a>,
        _offsets: &'a [PartitionOffsets],
    ) -> BoxFuture<'a, Result<Option<i64>, KafkaError>> {
        self.note(format!("kafka oldest unconsumed {}", brokers.group));
        futures::future::ready(Ok(*self.oldest.lock().unwrap())).boxed()
    }

    fn offsets_retention<'a>(
        &'a self,
        _brokers: Brokers<'a>,
        _topic: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, KafkaError>> {
        self.note("kafka offsets retention".to_owned());
        futures::future::ready(Ok(Some(10_080))).boxed()
    }

    fn schema<'a>(
        &'a self,
        request: SchemaRequest<'a>,
    ) -> BoxFuture<'a, Result<SchemaOutcome, tracehouse_schema::Error>> {
        self.note(format!(
            "clickhouse schema {}.{} verify_only={}",
            request.options.database, request.options.table, request.verify_only
        ));
        futures::future::ready(Ok(SchemaOutcome {
            version: 7,
            applied: Vec::new(),
            dedup_window: Some(request.options.dedup_window),
            missing: Vec::new(),
            retention: None,
            // As a real apply leaves it: what the options ask for.
            layouts: tracehouse_schema::layouts::wanted(request.options),
            kept_layouts: Vec::new(),
        }))
        .boxed()
    }

    fn forget(&self, pipeline: &str) {
        self.note(format!("forget {pipeline}"));
    }
}

impl PodMetricsSource for World {
    fn pod_metrics<'a>(&'a self, ip: &'a str) -> BoxFuture<'a, Result<String, String>> {
        self.note(format!("scrape {ip}"));
        let text = self.pod_metrics.lock().unwrap().get(ip).cloned();
        futures::future::ready(text.ok_or_else(|| format!("{ip}: connection refused"))).boxed()
    }
}
