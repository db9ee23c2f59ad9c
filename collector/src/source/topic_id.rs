//! The identity of a topic's log: its topic id (KIP-516), read with librdkafka's
//! `DescribeTopics`.
//!
//! Offsets alone do not name records: a topic deleted and created again, or a topic of the
//! same name on another cluster, counts from 0 again. The topic id differs in both cases
//! (a random UUID the controller gives each incarnation), so it goes into every
//! deduplication token and every commit's metadata ([`crate::offsets`]).
//!
//! Why hand-written FFI: rdkafka 0.39 wraps neither `DescribeTopics` nor topic ids, and
//! librdkafka's metadata call does not return them. This file is the crate's only `unsafe`:
//! one admin request on the client's own handle, every object it creates destroyed before
//! returning. Brokers before Kafka 2.8 have no topic ids (a zero UUID): the cluster id
//! stands in (it still tells two clusters apart, not two incarnations), and without that
//! the topic is named by offsets alone, as before this existed.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

use crate::batch::LogId;

/// The log `topic` names now on the cluster `client` talks to; `Err` when Kafka did not
/// answer (the caller asks again).
pub fn log_id<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<LogId, String> {
    match describe(client, topic, timeout)? {
        Some(id) => Ok(LogId::named(&id)),
        None => Ok(match client.fetch_cluster_id(timeout) {
            Some(cluster) => {
                tracing::warn!(topic, cluster = %cluster, "the broker has no topic ids (Kafka before 2.8): tokens name the cluster only, so a topic recreated under the same name is not told apart");
                LogId::named(&format!("cluster.{cluster}"))
            }
            None => {
                tracing::warn!(
                    topic,
                    "the broker names neither topic ids nor its cluster: tokens name offsets only"
                );
                LogId::legacy()
            }
        }),
    }
}

/// The topic id of `topic` in Kafka's text form (URL-safe base64, 22 characters), `None`
/// when the broker has none (the zero UUID).
fn describe<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let name = CString::new(topic).map_err(|_| format!("topic name {topic:?} holds a NUL"))?;
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let rk = client.native_ptr();
    // SAFETY: `rk` is the live handle `client` owns for the duration of this call; every
    // object created below is destroyed on every path out of this block, and the strings
    // read from the result are copied before the event that owns them is destroyed.
    unsafe {
        let mut names = [name.as_ptr()];
        let topics = rd::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        let mut errstr = [0 as std::ffi::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeTopics(rk, topics, options, queue);
        // The admin request times out on its own; wait a little longer for its answer.
        let event = rd::rd_kafka_queue_poll(queue, ms.saturating_add(1000));
        let out = read_event(event, topic);
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_TopicCollection_destroy(topics);
        out
    }
}

/// # Safety
/// `event` is null or a live `DescribeTopics` result event.
unsafe fn read_event(
    event: *mut rd::rd_kafka_event_t,
    topic: &str,
) -> Result<Option<String>, String> {
    if event.is_null() {
        return Err("DescribeTopics: no answer in time".into());
    }
    // SAFETY: per the function's contract; pointers read below belong to `event`.
    unsafe {
        if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!(
                "DescribeTopics: {}",
                text(rd::rd_kafka_event_error_string(event))
            ));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event);
        if result.is_null() {
            return Err("DescribeTopics: not a DescribeTopics result".into());
        }
        let mut n = 0usize;
        let descs = rd::rd_kafka_DescribeTopics_result_topics(result, &mut n);
        for i in 0..n {
            let d = *descs.add(i);
            if text(rd::rd_kafka_TopicDescription_name(d)) != topic {
                continue;
            }
            let err = rd::rd_kafka_TopicDescription_error(d);
            if !err.is_null()
                && rd::rd_kafka_error_code(err)
                    != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                return Err(format!(
                    "DescribeTopics {topic}: {}",
                    text(rd::rd_kafka_error_string(err))
                ));
            }
            let id = rd::rd_kafka_TopicDescription_topic_id(d);
            if id.is_null()
                || (rd::rd_kafka_Uuid_most_significant_bits(id) == 0
                    && rd::rd_kafka_Uuid_least_significant_bits(id) == 0)
            {
                return Ok(None);
            }
            return Ok(Some(text(rd::rd_kafka_Uuid_base64str(id))));
        }
        Err(format!("DescribeTopics: no description of {topic}"))
    }
}

/// # Safety
/// `p` is null or a NUL-terminated string that outlives this call.
unsafe fn text(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: per the function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}
