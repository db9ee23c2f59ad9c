//! The insert stage driven against a stand-in ClickHouse and dead-letter topic: bisection,
//! retries under one token, dead letters, acknowledgement, and abandonment at shutdown.

use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;

use prometheus_client::registry::Registry;

use super::*;
use crate::batch::BatchBuilder;
use crate::offsets::BatchRange;
use crate::workers::RecordEncoder;
use crate::workers::testing::CountingEncoder;

/// ClickHouse as the tests need it: refuses for good any body holding the line `refuse`,
/// fails the first `transient` attempts as busy, and keeps the lines it accepted.
#[derive(Default)]
struct FakeClickHouse {
    refuse: Option<&'static str>,
    transient: AtomicUsize,
    /// Token of every attempt, in order.
    attempts: Mutex<Vec<String>>,
    /// (token, lines) of every accepted insert.
    accepted: Mutex<Vec<(String, Vec<String>)>>,
}

impl Inserter for FakeClickHouse {
    async fn insert(&self, _query: &str, token: &str, body: Bytes) -> Result<(), InsertError> {
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
        let lines: Vec<String> = std::str::from_utf8(&body)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        if let Some(bad) = self.refuse
            && lines.iter().any(|l| l == bad)
        {
            return Err(InsertError::Server {
                code: 53,
                message: format!("type mismatch: {bad}"),
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
    fn landed(&self) -> Vec<String> {
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
    fn tokens(&self) -> Vec<String> {
        let accepted = self.accepted.lock().unwrap();
        accepted.iter().map(|(t, _)| t.clone()).collect()
    }
}

/// The dead-letter topic: keeps (offset, reason, detail) of what it parked; `failing`
/// refuses every record.
#[derive(Default)]
struct FakeDeadLetters {
    failing: AtomicBool,
    parked: Mutex<Vec<(i64, SkipReason, String)>>,
}

impl DeadLetterSink for FakeDeadLetters {
    async fn park(&self, batch: &RecordBatch, s: &Skipped, payload: &[u8]) -> Result<(), String> {
        assert_eq!((&*batch.topic, batch.partition), ("spans", 0));
        assert!(!payload.is_empty() || s.reason == SkipReason::Empty);
        if self.failing.load(Ordering::Relaxed) {
            return Err("broker down".into());
        }
        let parked = (s.offset, s.reason, s.detail.clone());
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
        body: Bytes,
    ) -> impl Future<Output = Result<(), InsertError>> + Send {
        (**self).insert(query, token, body)
    }
}

impl<T: DeadLetterSink> DeadLetterSink for Arc<T> {
    fn park(
        &self,
        batch: &RecordBatch,
        skipped: &Skipped,
        payload: &[u8],
    ) -> impl Future<Output = Result<(), String>> + Send {
        (**self).park(batch, skipped, payload)
    }
}

fn factory() -> EncoderFactory {
    Arc::new(|| Box::new(CountingEncoder::default()) as Box<dyn RecordEncoder>)
}

fn stage(
    ch: &Arc<FakeClickHouse>,
    dlq: Option<&Arc<FakeDeadLetters>>,
) -> (Stage, crossbeam_channel::Receiver<Ack>) {
    let (acks, rx) = crossbeam_channel::unbounded();
    let stage = Inserts {
        sink: ch.clone(),
        dead_letters: dlq.cloned(),
        query: "INSERT INTO t FORMAT TSV".into(),
        factory: factory(),
        metrics: Arc::new(Metrics::new(&mut Registry::default())),
        acks,
        retry_initial: Duration::from_millis(1),
        retry_max: Duration::from_millis(4),
        abandon: Arc::new(AtomicBool::new(false)),
        skip_log: std::sync::Mutex::new(RateLimit::new(Duration::from_secs(60))),
    };
    (stage, rx)
}

/// A batch of partition 0 from offset 100, one record per payload, encoded whole.
fn encoded(payloads: &[&[u8]]) -> Encoded {
    let mut b = BatchBuilder::new("spans".into(), 0, 1);
    for (i, p) in payloads.iter().enumerate() {
        b.push(100 + i as i64, 0, p);
    }
    let batch = Arc::new(b.take().unwrap());
    let mut enc = CountingEncoder::default();
    workers::encode_slice(&mut enc, &batch, 0..payloads.len())
}

fn reason(stage: &Stage, family: &str, reason: &'static str) -> u64 {
    let labels = ReasonLabels { reason };
    match family {
        "skipped" => stage.metrics.records_skipped.get_or_create(&labels).get(),
        "retries" => stage.metrics.insert_retries.get_or_create(&labels).get(),
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
