//! Decode/encode workers: CPU-heavy work off the async runtime and off the Kafka thread.
//!
//! Each worker thread owns its encoder (buffers are reused batch after batch and allocated
//! and freed on the same thread — the allocator-contention lesson of `docs/compat-notes.md` §6).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::BatchRange;
use crate::batch::{RecordBatch, SkipReason, Skipped};
use crate::bundle::{Bundle, BundleDesc};
use crate::config::Compression;
use crate::decode::DecodeError;
use crate::freshness::EndTimes;

/// What a worker needs: Kafka record payloads in, one compressed ClickHouse insert body out
/// (implemented by [`crate::insert::encoder`]'s configured encoder).
pub trait RecordEncoder: Send {
    /// The `INSERT INTO … (columns) FORMAT …` statement the body is meant for.
    fn insert_query(&self) -> String;
    /// Decode one record and append its spans as rows; returns the spans appended.
    /// On error nothing of the record was appended, and the error says why.
    fn append(&mut self, payload: &[u8]) -> Result<u64, DecodeError>;
    /// Take the compressed body of everything appended since the last call.
    fn finish(&mut self) -> Bytes;
    /// How [`RecordEncoder::finish`]'s bodies are compressed (none by default).
    fn compression(&self) -> Compression {
        Compression::None
    }
    /// Take the end times of the spans appended since the last call (none by default).
    fn take_end_times(&mut self) -> EndTimes {
        EndTimes::default()
    }
}

/// Makes one encoder per worker thread.
pub type EncoderFactory = Arc<dyn Fn() -> Box<dyn RecordEncoder> + Send + Sync>;

/// An insert body and how it is compressed: they travel together from the encoder to the
/// sink, so the sink sends `decompress=1` exactly when the encoder compressed.
#[derive(Debug, Clone, Default)]
pub struct Body {
    pub bytes: Bytes,
    pub compression: Compression,
}

impl Body {
    /// `enc`'s body of everything appended since the last call, as it compressed it.
    pub fn finish(enc: &mut dyn RecordEncoder) -> Self {
        Self {
            bytes: enc.finish(),
            compression: enc.compression(),
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// An encoded slice of a batch, ready to insert.
#[derive(Debug)]
pub struct Encoded {
    pub batch: Arc<RecordBatch>,
    /// Offsets this insert covers (the whole batch, or a part after a split).
    pub range: BatchRange,
    /// Indexes into `batch.records` this insert covers.
    pub records: Range<usize>,
    pub body: Body,
    pub rows: u64,
    /// Records of this slice that could not be decoded.
    pub undecodable: Vec<Skipped>,
    /// When its spans ended, for `tracehouse_span_freshness_seconds` once it is acknowledged.
    pub end_times: EndTimes,
}

/// What the workers encode: one partition's batch, or a bundle of several.
#[derive(Debug)]
pub enum Work {
    Batch(RecordBatch),
    Bundle(Bundle),
}

/// An encoded bundle: one body for every member, inserted under the bundle's token, and
/// each member's part (no body of its own: re-encoded only if the bundle must go out one
/// batch at a time) for its acknowledgement and its skipped records.
#[derive(Debug)]
pub struct EncodedBundle {
    pub desc: Arc<BundleDesc>,
    pub parts: Vec<Encoded>,
    pub body: Body,
    pub rows: u64,
    pub end_times: EndTimes,
}

/// What the insert stage receives.
#[derive(Debug)]
pub enum ToInsert {
    Batch(Encoded),
    Bundle(EncodedBundle),
}

/// Encode every member of `bundle` into one body.
pub fn encode_bundle(enc: &mut dyn RecordEncoder, bundle: Bundle) -> EncodedBundle {
    let mut parts = Vec::with_capacity(bundle.batches.len());
    let mut rows = 0;
    for batch in bundle.batches {
        let batch = Arc::new(batch);
        let n = batch.records.len();
        let (part_rows, undecodable) = append_slice(enc, &batch, 0..n);
        rows += part_rows;
        parts.push(Encoded {
            range: batch.range,
            batch,
            records: 0..n,
            body: Body::default(),
            rows: part_rows,
            undecodable,
            end_times: EndTimes::default(),
        });
    }
    EncodedBundle {
        desc: bundle.desc,
        parts,
        body: Body::finish(enc),
        rows,
        end_times: enc.take_end_times(),
    }
}

/// Append `records` of `batch` to the encoder: the rows appended and the records that
/// could not be decoded.
fn append_slice(
    enc: &mut dyn RecordEncoder,
    batch: &Arc<RecordBatch>,
    records: Range<usize>,
) -> (u64, Vec<Skipped>) {
    let mut rows = 0;
    let mut undecodable = Vec::new();
    for r in &batch.records[records.clone()] {
        match enc.append(batch.payload(r)) {
            Ok(n) => rows += n,
            Err(e) => undecodable.push(Skipped {
                offset: r.offset,
                reason: match e {
                    DecodeError::Expanded { .. } => SkipReason::Expanded,
                    _ => SkipReason::DecodeError,
                },
                // From here on the error travels as text: a dead-letter header and a log.
                detail: e.to_string(),
                payload: Some(batch.payload(r).to_vec()),
            }),
        }
    }
    (rows, undecodable)
}

/// Encode `records` of `batch` (a whole batch or one half of a split).
pub fn encode_slice(
    enc: &mut dyn RecordEncoder,
    batch: &Arc<RecordBatch>,
    records: Range<usize>,
) -> Encoded {
    let (rows, undecodable) = append_slice(enc, batch, records.clone());
    let body = Body::finish(enc);
    let end_times = enc.take_end_times();
    let range = if records == (0..batch.records.len()) {
        batch.range
    } else {
        // A split half covers exactly its own records' offsets.
        let recs = &batch.records[records.clone()];
        BatchRange {
            first: recs[0].offset,
            last: recs[recs.len() - 1].offset,
        }
    };
    Encoded {
        batch: batch.clone(),
        range,
        records,
        body,
        rows,
        undecodable,
        end_times,
    }
}

/// Start `threads` workers: batches and bundles in, encoded ones out. Workers end when the
/// input channel closes or the output is dropped.
pub fn spawn(
    threads: usize,
    factory: EncoderFactory,
    input: crossbeam_channel::Receiver<Work>,
    output: tokio::sync::mpsc::Sender<ToInsert>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..threads)
        .map(|i| {
            let factory = factory.clone();
            let input = input.clone();
            let output = output.clone();
            std::thread::Builder::new()
                .name(format!("encode-{i}"))
                .spawn(move || {
                    let mut enc = factory();
                    while let Ok(work) = input.recv() {
                        let encoded = match work {
                            Work::Batch(batch) => {
                                let batch = Arc::new(batch);
                                let n = batch.records.len();
                                ToInsert::Batch(encode_slice(enc.as_mut(), &batch, 0..n))
                            }
                            Work::Bundle(bundle) => {
                                ToInsert::Bundle(encode_bundle(enc.as_mut(), bundle))
                            }
                        };
                        if output.blocking_send(encoded).is_err() {
                            return;
                        }
                    }
                })
                .expect("spawn encode worker")
        })
        .collect()
}

#[cfg(test)]
pub mod testing {
    //! A toy encoder for unit tests: a record is a JSON number of spans, or garbage.
    use super::*;

    #[derive(Debug, Default)]
    pub struct CountingEncoder {
        body: Vec<u8>,
    }

    impl RecordEncoder for CountingEncoder {
        fn insert_query(&self) -> String {
            "INSERT INTO t FORMAT TSV".into()
        }
        fn append(&mut self, payload: &[u8]) -> Result<u64, DecodeError> {
            let n: u64 = serde_json::from_slice(payload)?;
            self.body.extend_from_slice(payload);
            self.body.push(b'\n');
            Ok(n)
        }
        fn finish(&mut self) -> Bytes {
            Bytes::from(std::mem::take(&mut self.body))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::CountingEncoder;
    use super::*;
    use crate::batch::BatchBuilder;

    #[test]
    fn undecodable_records_are_reported_and_the_rest_encoded() {
        let mut b = BatchBuilder::new("t".into(), 0, 0);
        b.push(10, 0, b"3");
        b.push(11, 0, b"\xff\xfe");
        b.push(12, 0, b"4");
        let batch = Arc::new(b.take().unwrap());
        let mut enc = CountingEncoder::default();
        let e = encode_slice(&mut enc, &batch, 0..3);
        assert_eq!(e.rows, 7);
        assert_eq!(
            e.range,
            BatchRange {
                first: 10,
                last: 12
            }
        );
        assert_eq!(e.undecodable.len(), 1);
        assert_eq!(e.undecodable[0].offset, 11);
        assert_eq!(&e.body.bytes[..], b"3\n4\n");

        let half = encode_slice(&mut enc, &batch, 2..3);
        assert_eq!(
            half.range,
            BatchRange {
                first: 12,
                last: 12
            }
        );
        assert_eq!(half.rows, 4);
    }
}
