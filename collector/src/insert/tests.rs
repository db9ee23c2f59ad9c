//! The insert stage driven against a stand-in ClickHouse and dead-letter topic: bisection,
//! retries under one token, dead letters, acknowledgement, abandonment at shutdown, batches
//! of partitions given away, the rejection breaker and copies the topic never takes.

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use prometheus_client::registry::Registry;

use super::*;
use crate::batch::BatchBuilder;
use crate::batch::BatchRange;
use crate::workers::RecordEncoder;
use crate::workers::testing::CountingEncoder;

/// ClickHouse as the tests need it: refuses for good any body holding the line `refuse`,
/// fails the first `transient` attempts as busy, and keeps the lines it accepted.
#[derive(Default)]
pub(super) struct FakeClickHouse {
    pub(super) refuse: Option<&'static str>,
    /// Refuse `refuse` with this code and message instead of 53 (type mismatch).
    pub(super) refuse_with: Option<(u32, &'static str)>,
    /// Refuse every body (a configuration problem) while set.
    pub(super) refuse_all: AtomicBool,
    pub(super) transient: AtomicUsize,
    /// A proxy in front: bodies over this many bytes get HTTP 413 without a ClickHouse code.
    pub(super) max_body: Option<usize>,
    /// Token of every attempt, in order.
    pub(super) attempts: Mutex<Vec<String>>,
    /// (token, lines) of every accepted insert.
    pub(super) accepted: Mutex<Vec<(String, Vec<String>)>>,
}

impl Inserter for FakeClickHouse {
    async fn insert(&self, _query: &str, token: &str, body: Body) -> Result<(), InsertError> {
        let body = body.bytes;
        self.attempts.lock().unwrap().push(token.to_string());
        if self
            .transient
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(InsertError::Server {
                code: 241,
                message: "memory limit exceeded".into(),
            });
        }
        if self.max_body.is_some_and(|max| body.len() > max) {
            return Err(InsertError::Http {
                status: 413,
                message: "<html><head><title>413 Request Entity Too Large</title>".into(),
            });
        }
        let lines: Vec<String> = std::str::from_utf8(&body)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        if self.refuse_all.load(Ordering::Relaxed) {
            return Err(InsertError::Server {
                code: 27,
                message: "Cannot parse input: expected '\\t' before: 'x'".into(),
            });
        }
        if let Some(bad) = self.refuse
            && lines.iter().any(|l| l == bad)
        {
            let (code, message) = self.refuse_with.unwrap_or((53, "type mismatch"));
            return Err(InsertError::Server {
                code,
                message: format!("{message}: {bad}"),
            });
        }
        self.accepted
            .lock()
            .unwrap()
            .push((token.to_string(), lines));
        Ok(())
    }
}

impl FakeClickHouse {
    pub(super) fn landed(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .accepted
            .lock()
            .unwrap()
            .iter()
            .flat_map(|(_, l)| l.clone())
            .collect();
        all.sort();
        all
    }
    pub(super) fn tokens(&self) -> Vec<String> {
        let accepted = self.accepted.lock().unwrap();
        accepted.iter().map(|(t, _)| t.clone()).collect()
    }
}

/// The dead-letter topic: keeps (offset, reason, detail, copy bytes) of what it parked;
/// `failing` refuses every record for a while (transient), `max_bytes` refuses larger
/// copies for good (a topic's `max.message.bytes`).
#[derive(Default)]
pub(super) struct FakeDeadLetters {
    pub(super) failing: AtomicBool,
    pub(super) max_bytes: Option<usize>,
    pub(super) refuse_everything: bool,
    pub(super) parked: Mutex<Vec<(i64, SkipReason, String, usize)>>,
}

impl DeadLetterSink for FakeDeadLetters {
    async fn park(&self, l: &Letter<'_>) -> Result<(), ParkError> {
        assert_eq!((&*l.batch.topic, l.batch.partition), ("spans", 0));
        if self.failing.load(Ordering::Relaxed) {
            return Err(ParkError {
                permanent: false,
                message: "broker down".into(),
            });
        }
        if self.refuse_everything || self.max_bytes.is_some_and(|max| l.payload.len() > max) {
            return Err(ParkError {
                permanent: true,
                message: "Broker: Message size too large".into(),
            });
        }
        let s = l.skipped;
        let parked = (s.offset, s.reason, s.detail.clone(), l.payload.len());
        self.parked.lock().unwrap().push(parked);
        Ok(())
    }
}

type Stage = Inserts<Arc<FakeClickHouse>, Arc<FakeDeadLetters>>;

impl<T: Inserter> Inserter for Arc<T> {
    fn insert(
        &self,
        query: &str,
        token: &str,
        body: Body,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        (**self).insert(query, token, body)
    }
}

impl<T: DeadLetterSink> DeadLetterSink for Arc<T> {
    fn park(&self, letter: &Letter<'_>) -> impl Future<Output = Result<(), ParkError>> + Send {
        (**self).park(letter)
    }
}

pub(super) fn factory() -> EncoderFactory {
    Arc::new(|| Box::new(CountingEncoder::default()) as Box<dyn RecordEncoder>)
}

pub(super) fn stage(
    ch: &Arc<FakeClickHouse>,
    dlq: Option<&Arc<FakeDeadLetters>>,
) -> (Stage, crossbeam_channel::Receiver<Ack>) {
    let (acks, rx) = crossbeam_channel::unbounded();
    let stage = Inserts {
        sink: ch.clone(),
        dead_letters: dlq.cloned(),
        dead_letter_max_bytes: crate::config::DEFAULT_DEAD_LETTER_MAX_BYTES,
        holdings: Holdings::everything(),
        breaker: RejectBreaker::new(crate::config::DEFAULT_REJECT_BREAKER_RECORDS),
        query: "INSERT INTO t FORMAT TSV".into(),
        factory: factory(),
        metrics: Arc::new(Metrics::new(&mut Registry::default())),
        acks,
        retry_initial: Duration::from_millis(1),
        retry_max: Duration::from_millis(4),
        abandon: Arc::new(AtomicBool::new(false)),
        skip_log: std::sync::Mutex::new(RateLimit::new(Duration::from_secs(60))),
        max_body_bytes: 0,
    };
    (stage, rx)
}

/// A batch of partition 0 from offset 100, one record per payload, encoded whole.
pub(super) fn encoded(payloads: &[&[u8]]) -> Encoded {
    let mut b = BatchBuilder::new("spans".into(), 0, 1);
    for (i, p) in payloads.iter().enumerate() {
        b.push(100 + i as i64, 0, p);
    }
    let batch = Arc::new(b.take().unwrap());
    let mut enc = CountingEncoder::default();
    workers::encode_slice(&mut enc, &batch, 0..payloads.len())
}

pub(super) fn reason(stage: &Stage, family: &str, reason: &'static str) -> u64 {
    let labels = ReasonLabels { reason };
    match family {
        "skipped" => stage.metrics.records_skipped.get_or_create(&labels).get(),
        "retries" => stage.metrics.insert_retries.get_or_create(&labels).get(),
        "degraded" => stage
            .metrics
            .dead_letter_degraded
            .get_or_create(&labels)
            .get(),
        "dropped" => stage.metrics.batches_dropped.get_or_create(&labels).get(),
        "splits" => stage.metrics.insert_splits.get_or_create(&labels).get(),
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn a_refused_record_is_isolated_by_bisection_dead_lettered_and_every_good_row_lands() {
    let ch = Arc::new(FakeClickHouse {
        refuse: Some("13"),
        ..Default::default()
    });
    let dlq = Arc::new(FakeDeadLetters::default());
    let (stage, acks) = stage(&ch, Some(&dlq));
    stage
        .insert_batch(encoded(&[b"1", b"2", b"3", b"4", b"5", b"13", b"7", b"8"]))
        .await;

    assert_eq!(ch.landed(), ["1", "2", "3", "4", "5", "7", "8"]);
    // Each accepted half went in under the token of its own offsets.
    assert_eq!(
        ch.tokens(),
        ["spans-0-100-103", "spans-0-104-104", "spans-0-106-107"]
    );
    let parked = dlq.parked.lock().unwrap().clone();
    assert_eq!(parked.len(), 1);
    assert_eq!((parked[0].0, parked[0].1), (105, SkipReason::Rejected));
    assert!(
        parked[0].2.contains("ClickHouse error 53"),
        "{}",
        parked[0].2
    );
    let ack = acks.try_recv().expect("the batch is acknowledged");
    assert_eq!(
        ack.range,
        BatchRange {
            first: 100,
            last: 107
        }
    );
    assert_eq!(reason(&stage, "skipped", "rejected"), 1);
    assert_eq!(stage.metrics.records_dead_lettered.get(), 1);
}

#[tokio::test]
async fn transient_failures_retry_under_one_token_until_the_insert_passes() {
    let ch = Arc::new(FakeClickHouse {
        transient: AtomicUsize::new(3),
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, None);
    stage.insert_batch(encoded(&[b"1", b"2"])).await;
    let attempts = ch.attempts.lock().unwrap().clone();
    assert_eq!(attempts, vec!["spans-0-100-101"; 4]);
    assert_eq!(ch.landed(), ["1", "2"]);
    assert_eq!(reason(&stage, "retries", "server_busy"), 3);
    assert!(acks.try_recv().is_ok());
    assert!(acks.try_recv().is_err(), "acknowledged once");
}

#[tokio::test]
async fn span_freshness_is_observed_once_when_clickhouse_acknowledges_not_per_attempt() {
    let ch = Arc::new(FakeClickHouse {
        transient: AtomicUsize::new(2),
        ..Default::default()
    });
    let (stage, _acks) = stage(&ch, None);
    let mut e = encoded(&[b"1", b"2"]);
    let ended = crate::freshness::unix_now_ns() - 3_000_000_000;
    e.end_times
        .record_all(&[ended; 3], crate::freshness::unix_now_ns);
    stage.insert_batch(e).await;
    let (sum, count, buckets) = stage.metrics.span_freshness.get();
    assert_eq!(count, 3);
    assert!(sum >= 3.0 * 3.0 * 15.0 / 16.0, "{sum}");
    assert_eq!(buckets.iter().map(|b| b.1).sum::<u64>(), 3);
}

#[tokio::test]
async fn undecodable_and_skipped_records_go_to_the_dead_letters_and_the_rest_is_acknowledged() {
    let ch = Arc::new(FakeClickHouse::default());
    let dlq = Arc::new(FakeDeadLetters::default());
    let (stage, acks) = stage(&ch, Some(&dlq));
    let mut b = BatchBuilder::new("spans".into(), 0, 1);
    b.push(100, 0, b"2");
    b.push(101, 0, b"not a number");
    b.push_skipped(
        102,
        0,
        Skipped {
            offset: 102,
            reason: SkipReason::Oversized,
            detail: "too big".into(),
            payload: Some(b"huge".to_vec()),
        },
    );
    b.push(103, 0, b"3");
    let batch = Arc::new(b.take().unwrap());
    let e = workers::encode_slice(&mut CountingEncoder::default(), &batch, 0..3);
    stage.insert_batch(e).await;

    assert_eq!(ch.landed(), ["2", "3"]);
    let mut parked: Vec<(i64, SkipReason)> = dlq
        .parked
        .lock()
        .unwrap()
        .iter()
        .map(|p| (p.0, p.1))
        .collect();
    parked.sort_by_key(|p| p.0);
    assert_eq!(
        parked,
        [(101, SkipReason::DecodeError), (102, SkipReason::Oversized)]
    );
    assert!(acks.try_recv().is_ok());
}

#[tokio::test]
async fn a_batch_of_only_undecodable_records_is_never_sent_but_still_acknowledged() {
    let ch = Arc::new(FakeClickHouse::default());
    let (stage, acks) = stage(&ch, None);
    stage.insert_batch(encoded(&[b"x", b"y"])).await;
    assert!(ch.attempts.lock().unwrap().is_empty());
    assert_eq!(reason(&stage, "skipped", "decode_error"), 2);
    assert!(acks.try_recv().is_ok());
}

#[tokio::test]
async fn abandoned_at_shutdown_a_failing_batch_is_left_unacknowledged_for_replay() {
    let ch = Arc::new(FakeClickHouse {
        transient: AtomicUsize::new(usize::MAX),
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, None);
    let abandon = stage.abandon.clone();
    let task = tokio::spawn(async move { stage.insert_batch(encoded(&[b"1"])).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(ch.attempts.lock().unwrap().len() > 1, "still retrying");
    abandon.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops retrying once abandoned")
        .unwrap();
    assert!(acks.try_recv().is_err(), "nothing acknowledged");
}

#[tokio::test]
async fn rows_in_but_dead_letters_unparked_at_shutdown_leave_the_batch_unacknowledged() {
    let ch = Arc::new(FakeClickHouse::default());
    let dlq = Arc::new(FakeDeadLetters::default());
    dlq.failing.store(true, Ordering::Relaxed);
    let (stage, acks) = stage(&ch, Some(&dlq));
    let abandon = stage.abandon.clone();
    let task = tokio::spawn(async move { stage.insert_batch(encoded(&[b"1", b"bad"])).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    abandon.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops once abandoned")
        .unwrap();
    // The rows went in; the replay re-inserts them under the same token (a no-op) and
    // parks the bad record then.
    assert_eq!(ch.landed(), ["1"]);
    assert!(acks.try_recv().is_err());
}

/// Runs `insert_batch` to its end, or fails the test when it does not end in 5 s (the
/// stalls these tests guard against never end).
pub(super) async fn finishes(stage: &Stage, e: Encoded) {
    tokio::time::timeout(Duration::from_secs(5), stage.insert_batch(e))
        .await
        .expect("the batch ends: a deterministic failure must not stall its partition");
}

#[tokio::test]
async fn code_252_too_many_partitions_is_bisected_like_any_refusal_not_retried_forever() {
    let ch = Arc::new(FakeClickHouse {
        refuse: Some("101"),
        refuse_with: Some((
            252,
            "Too many partitions for single INSERT block (more than 100). The limit is \
             controlled by 'max_partitions_per_insert_block' setting",
        )),
        ..Default::default()
    });
    let dlq = Arc::new(FakeDeadLetters::default());
    let (stage, acks) = stage(&ch, Some(&dlq));
    finishes(&stage, encoded(&[b"1", b"2", b"101", b"4"])).await;
    assert_eq!(ch.landed(), ["1", "2", "4"]);
    let parked = dlq.parked.lock().unwrap().clone();
    assert_eq!((parked[0].0, parked[0].1), (102, SkipReason::Rejected));
    assert!(
        parked[0].2.contains("ClickHouse error 252"),
        "{}",
        parked[0].2
    );
    assert!(acks.try_recv().is_ok());
}

#[tokio::test]
async fn a_copy_the_dead_letter_topic_never_takes_is_cut_then_sent_as_headers_then_the_batch_is_acknowledged()
 {
    let ch = Arc::new(FakeClickHouse::default());
    // A topic at Kafka's default max.message.bytes (~1 MiB) and a 3 MiB skipped record.
    let dlq = Arc::new(FakeDeadLetters {
        max_bytes: Some(1 << 20),
        ..Default::default()
    });
    let (mut stage, acks) = stage(&ch, Some(&dlq));
    let mut b = BatchBuilder::new("spans".into(), 0, 1);
    b.push(100, 0, b"2");
    let poison = vec![b'x'; 3 << 20];
    b.push(101, 0, &poison);
    b.push(102, 0, b"3");
    let batch = Arc::new(b.take().unwrap());
    let e = workers::encode_slice(&mut CountingEncoder::default(), &batch, 0..3);
    // The bound fits the topic: the cut copy parks.
    finishes(&stage, e).await;
    assert_eq!(dlq.parked.lock().unwrap()[0].3, 1_000_000);
    assert_eq!(reason(&stage, "degraded", "truncated"), 1);
    assert!(acks.try_recv().is_ok());

    // A bound over what the topic takes: the cut copy is refused for good, the headers
    // alone park.
    stage.dead_letter_max_bytes = 2 << 20;
    let e = workers::encode_slice(&mut CountingEncoder::default(), &batch, 0..3);
    finishes(&stage, e).await;
    assert_eq!(dlq.parked.lock().unwrap()[1].3, 0);
    assert_eq!(reason(&stage, "degraded", "headers_only"), 1);
    assert!(acks.try_recv().is_ok());
    assert_eq!(ch.landed(), ["2", "2", "3", "3"]);
}

#[tokio::test]
async fn a_copy_refused_even_as_headers_is_given_up_and_counted_not_retried_forever() {
    let ch = Arc::new(FakeClickHouse::default());
    // A topic that refuses every message for good (its max.message.bytes below the
    // headers' size, or a format it does not take).
    let dlq = Arc::new(FakeDeadLetters {
        refuse_everything: true,
        ..Default::default()
    });
    let (stage, acks) = stage(&ch, Some(&dlq));
    finishes(&stage, encoded(&[b"1", b"bad"])).await;
    assert_eq!(reason(&stage, "degraded", "given_up"), 1);
    assert_eq!(stage.metrics.records_dead_lettered.get(), 0);
    assert_eq!(reason(&stage, "skipped", "decode_error"), 1);
    assert!(
        acks.try_recv().is_ok(),
        "the batch is acknowledged all the same"
    );
}

#[tokio::test]
async fn a_batch_of_a_partition_given_away_stops_retrying_and_is_not_acknowledged() {
    let ch = Arc::new(FakeClickHouse {
        transient: AtomicUsize::new(usize::MAX),
        ..Default::default()
    });
    let (mut stage, acks) = stage(&ch, None);
    let holdings = Holdings::new();
    holdings.publish([(crate::source::PartitionId::new("spans", 0), 1)]);
    stage.holdings = holdings.clone();
    let stage = Arc::new(stage);
    let task = {
        let stage = stage.clone();
        tokio::spawn(async move { stage.insert_batch(encoded(&[b"1"])).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(ch.attempts.lock().unwrap().len() > 1, "retrying while held");
    // A rebalance gives the partition away (or takes it back in a new generation).
    holdings.publish([(crate::source::PartitionId::new("spans", 0), 2)]);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("stops retrying once the partition is given away")
        .unwrap();
    let attempts = ch.attempts.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        ch.attempts.lock().unwrap().len(),
        attempts,
        "no attempt after"
    );
    assert!(acks.try_recv().is_err(), "the new owner replays it");
    assert_eq!(reason(&stage, "dropped", "revoked"), 1);
}

#[tokio::test]
async fn when_every_record_is_refused_the_breaker_stops_skipping_and_retries_until_the_fix() {
    let ch = Arc::new(FakeClickHouse::default());
    ch.refuse_all.store(true, Ordering::Relaxed);
    let (mut stage, acks) = stage(&ch, None);
    stage.breaker = RejectBreaker::new(3);
    let stage = Arc::new(stage);
    let task = {
        let stage = stage.clone();
        tokio::spawn(async move { stage.insert_batch(encoded(&[b"1", b"2", b"3", b"4"])).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !task.is_finished(),
        "the third refusal in a row opens the breaker"
    );
    assert_eq!(
        reason(&stage, "skipped", "rejected"),
        0,
        "counted at the end"
    );
    assert_eq!(stage.metrics.reject_breaker_open.get(), 1);
    // The configuration is fixed: the held record goes in, the breaker closes, the rest
    // of the batch follows.
    ch.refuse_all.store(false, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("ends once inserts pass")
        .unwrap();
    assert_eq!(
        ch.landed(),
        ["3", "4"],
        "records 1 and 2 went before it opened"
    );
    assert_eq!(reason(&stage, "skipped", "rejected"), 2);
    assert_eq!(stage.metrics.reject_breaker_open.get(), 0);
    assert!(acks.try_recv().is_ok());
}

#[tokio::test]
async fn refusals_of_too_many_partitions_never_open_the_breaker() {
    let ch = Arc::new(FakeClickHouse {
        refuse: Some("101"),
        refuse_with: Some((
            252,
            "Too many partitions for single INSERT block (more than 100)",
        )),
        ..Default::default()
    });
    let (mut stage, acks) = stage(&ch, None);
    stage.breaker = RejectBreaker::new(2);
    for _ in 0..5 {
        finishes(&stage, encoded(&[b"101"])).await;
    }
    assert_eq!(reason(&stage, "skipped", "rejected"), 5);
    assert_eq!(acks.try_iter().count(), 5);
}
