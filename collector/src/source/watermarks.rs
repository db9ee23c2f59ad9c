//! The watermark thread: high watermarks of the held partitions, for lag in records.
//!
//! Why a thread and a client of its own: paused partitions are not fetched, so the
//! consumer itself stops learning how far the log has grown exactly when lag matters most.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::holdings::Holdings;
use super::machine::PartitionId;
use crate::kafka_clients::{TokenSource, WithToken};

/// High watermark of each held partition, refreshed every second.
pub type Watermarks = Arc<Mutex<HashMap<PartitionId, i64>>>;

/// Refresh the high watermarks of the held partitions every second until `stop`.
pub fn spawn(
    client: ClientConfig,
    oauth: Option<Arc<TokenSource>>,
    held: Holdings,
    watermarks: Watermarks,
    stop: Arc<AtomicBool>,
) {
    let consumer = match client.create::<BaseConsumer>() {
        Ok(c) => WithToken::new(c, oauth.as_ref()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot create the watermark client; lag in records will not be reported");
            return;
        }
    };
    let _ = std::thread::Builder::new()
        .name("kafka-watermarks".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for id in held.partitions() {
                    if let Ok((_low, high)) =
                        consumer.fetch_watermarks(&id.topic, id.partition, Duration::from_secs(2))
                    {
                        watermarks.lock().expect("hw lock").insert(id, high);
                    }
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        });
}
