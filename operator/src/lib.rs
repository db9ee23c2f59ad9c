//! tracehouse operator: a `TracePipeline` in, schema migrations and a gateway collector
//! fleet sized to the topics' partitions out.
//!
//! - [`crd`]: the resource users write, and its status (`spec.autoscaling` and
//!   `status.autoscaling` included);
//! - [`autoscale`]: autoscaling on lag and memory — the pure decision (replica owner,
//!   partition ladder, window of samples → replicas and reason) inside its IO shell (the
//!   sampler over the reconcile's offsets and pods and the pods' /metrics, and the
//!   reconcile's sizing step: the window per pipeline, `status.autoscaling`, the scaling
//!   Events);
//! - [`builders`]: pure desired state (ConfigMap, Deployment, Service, PDB, replica math),
//!   with [`defaults`]: the chart's collector defaults under each pipeline's own settings;
//! - [`status`]: pure status and Event derivation; [`gateway_diagnosis`]: why a gateway
//!   fails, from its pods and Deployment; [`gateway_pods`]: a pod's readiness and the
//!   collector's memory limit; [`offsets_retention`]: the warning for a pipeline stopped
//!   longer than the broker keeps its group's offsets;
//! - [`reconcile`]: the controller — a span per reconcile, one sequence of steps
//!   (`converge`) and one report (`report`), thin IO around the pure parts, every read of
//!   the world outside Kubernetes through one door (`reconcile::Backends`): [`kafka`] (one
//!   client per pipeline: partition counts, the group's offsets, the broker's offsets
//!   retention; the Kafka security settings; [`lag`], how far the group is behind) and
//!   [`schema_step`] (the schema migrations of the traces table, through the schema crate);
//!   [`secrets`] (each Secret read once, everything else derived) and [`objects`]
//!   (server-side apply that skips what is already in place);
//! - [`skew`]: operator ↔ collector version skew — which config revision a gateway's
//!   collector knows (its `tracehouse_build_info`), and the `ConfigApplied` condition of
//!   the settings left out for it (pure);
//! - [`endpoints`]: the optional allow-list of the Kafka and ClickHouse hosts a pipeline may
//!   name (pure; a pipeline outside it is refused before anything is dialled);
//! - [`error`]: the reconciler's errors, each with a metric label and a condition reason;
//! - [`leader`]: Lease-based leader election; [`metrics`]: `/metrics` and `/healthz`, on the
//!   address [`listen`] reads from `--metrics-addr` (every address, IPv6 included, by default);
//!   [`pipeline_metrics`]: the per-pipeline gauges the dashboards and alerts read;
//! - [`quantity`]: Kubernetes quantities (`512Mi`, `500m`) as numbers, the one parser.

pub mod autoscale;
pub mod builders;
pub mod crd;
pub mod crd_apply;
pub mod defaults;
pub mod endpoints;
pub mod error;
pub mod gateway_diagnosis;
pub mod gateway_pods;
pub mod kafka;
pub mod lag;
pub mod leader;
pub mod listen;
pub mod metrics;
pub mod objects;
pub mod offsets_retention;
pub mod pipeline_metrics;
pub mod quantity;
pub mod reconcile;
pub mod schema_step;
pub mod secrets;
pub mod skew;
pub mod status;

/// The one field manager of every server-side apply (objects and status), also the
/// `app.kubernetes.io/managed-by` label value and the Events' reporting controller.
pub const FIELD_MANAGER: &str = "tracehouse-operator";
/// Finalizer on every `TracePipeline`; its cleanup never drops ClickHouse data.
pub const FINALIZER: &str = "tracehouse.dev/finalizer";
