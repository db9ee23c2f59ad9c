//! Encode: spans → one ClickHouse insert body, in RowBinary or Native, LZ4-compressed
//! in ClickHouse's block framing.
//!
//! [`Encoder`] is what a worker thread owns: it is fed raw Kafka payloads (or decoded
//! requests) and hands back the body for `INSERT INTO db.t (cols) FORMAT <format>`
//! ([`Encoder::insert_sql`]) sent with `decompress=1`. Its buffers live as long as it
//! does, so a steady stream of batches allocates almost nothing after warm-up, and the
//! memory it does allocate is freed on the same thread (the allocator-contention lesson
//! of `docs/compat-notes.md` §6).
//!
//! Reading and writing are fused on purpose: a payload is read in place through
//! [`crate::decode::proto`]'s borrowed views and its rows written in the same pass (no
//! message tree per record; see the README's fast path), so the [`Encoder`] is where a
//! record is decoded too. [`crate::decode`] stays the reference and the fallback.
//!
//! Columns, their order and their types come from the schema crate's insert-column
//! list ([`plan`]); the per-column values from [`crate::rows`].

pub mod compress;
mod native;
mod native_json;
mod native_lc;
pub mod plan;
mod rowbinary;

use std::sync::Arc;

use bumpalo::Bump;
use bytes::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use tracehouse_schema::{Attributes, ClickHouseType, InsertFormat, TableOptions, insert_sql};

use crate::decode::proto::{self, ResourceView, ScopeView, SpanScratch, SpanView};
use crate::decode::{self, DecodeError, Encoding};
use crate::freshness::{self, EndTimes};
use crate::pool::{BufPool, PooledBuf};
use crate::process::{self, Processor, RuleCounts, Verdict};
use crate::rows::{self, JsonObject, MapAttrs};
use native::NativeBlock;
use plan::PlannedColumn;

/// Whether the body is compressed (the configuration's `clickhouse.compression`).
pub use crate::config::Compression;

/// How an [`Encoder`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncoderOptions {
    /// `Native` or `RowBinary`; `Auto` is resolved for the table when the encoder is
    /// built (see [`InsertFormat::resolve`]).
    pub format: InsertFormat,
    pub compression: Compression,
    /// Native only: a block is cut once its columns hold about this many bytes.
    /// The server squashes small blocks anyway; this bounds the encoder's memory.
    pub native_block_bytes: usize,
    /// A record whose rows grow past this many uncompressed bytes is refused as
    /// [`DecodeError::Expanded`] (every span row repeats its resource's attributes, so one
    /// small record can expand a thousandfold): the bound of an encoder's memory per record.
    pub max_expanded_record_bytes: usize,
}

impl EncoderOptions {
    pub const DEFAULT_NATIVE_BLOCK_BYTES: usize = 2 << 20;
    pub const DEFAULT_MAX_EXPANDED_RECORD_BYTES: usize = 64 << 20;

    pub fn new(format: InsertFormat) -> Self {
        Self {
            format,
            compression: Compression::Lz4,
            native_block_bytes: Self::DEFAULT_NATIVE_BLOCK_BYTES,
            max_expanded_record_bytes: Self::DEFAULT_MAX_EXPANDED_RECORD_BYTES,
        }
    }
}

/// Why an encoder cannot be built for a table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The schema gives a column a type the encoders cannot write for its role.
    #[error("column {column} has type {ch_type}; the encoder writes {expected} there")]
    UnsupportedColumn {
        column: &'static str,
        ch_type: String,
        expected: String,
    },
}

/// Attributes rendered for one column value, in the table's attribute layout.
#[derive(Debug)]
pub(crate) enum Rendered {
    Map(MapAttrs),
    Json(JsonObject),
}

impl Rendered {
    fn new(mode: Attributes) -> Self {
        match mode {
            Attributes::Map => Self::Map(MapAttrs::default()),
            Attributes::Json => Self::Json(JsonObject::default()),
        }
    }

    /// Renders `attrs` (`KeyValue` bodies whose values are at message depth `depth`).
    fn fill(&mut self, attrs: &[&[u8]], depth: usize) -> proto::Result<()> {
        match self {
            Self::Map(m) => m.fill(attrs, depth),
            Self::Json(j) => j.fill(attrs, depth),
        }
    }
}

/// Everything a row writer needs about one span; borrowed, built per span for free.
#[derive(Debug)]
pub(crate) struct SpanRow<'a> {
    pub span: &'a SpanView<'a>,
    /// The span's events, links and their attribute bodies.
    pub lists: &'a SpanScratch<'a>,
    pub service_name: &'a [u8],
    pub scope_name: &'a [u8],
    pub scope_version: &'a [u8],
    pub resource: &'a Rendered,
    /// Changes whenever `resource` does (a new resource), for what is worked out once per
    /// resource.
    pub resource_generation: u64,
    pub attrs: &'a Rendered,
}

#[derive(Debug)]
enum Rows {
    RowBinary,
    Native(NativeBlock),
}

/// Where a record's rows start, to take them back if the record turns out unusual.
#[derive(Debug)]
struct Mark {
    raw: usize,
    rows: usize,
    /// [`NativeBlock::mark`]'s column lengths.
    native: Vec<usize>,
}

/// Why a record's rows were taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The in-place reader does not take this shape: `prost` decodes it instead.
    Unusual,
    /// The record's rows grew past the expansion limit (bytes so far).
    Expanded(usize),
}

impl From<proto::Unusual> for Stop {
    fn from(_: proto::Unusual) -> Self {
        Stop::Unusual
    }
}

/// How often (in rows) a record's growth is checked against the expansion limit: summing
/// the column lengths costs about as much as a small row, so not at every row. A record
/// overshoots the limit by at most this many rows.
const EXPANSION_CHECK_ROWS: usize = 32;

/// Body buffers an encoder owns for reuse: the one it fills and those in flight, which
/// come back to it. (More bodies in flight than this get plain buffers.)
const BODY_POOL_BUFFERS: usize = 6;
/// Larger body buffers are freed rather than kept.
const BODY_POOL_MAX_CAPACITY: usize = 64 << 20;

/// Turns spans into one insert body at a time. Not `Sync`: one per worker thread.
#[derive(Debug)]
pub struct Encoder {
    options: EncoderOptions,
    plan: Vec<PlannedColumn>,
    insert_sql: String,
    rows: Rows,
    /// Uncompressed bytes not yet compressed (RowBinary rows, or cut Native blocks).
    raw: Vec<u8>,
    /// The compressed body so far.
    body: PooledBuf,
    compressor: compress::Compressor,
    /// Buffers of bodies handed out by [`Self::finish`], back once their last `Bytes` is
    /// dropped (after the insert), so the next body reuses their pages.
    bodies: BufPool,
    row_count: usize,
    // Per-resource and per-span scratch, reused for the encoder's whole life.
    service_name: Vec<u8>,
    /// Reused by [`Self::mark`].
    mark_scratch: Vec<usize>,
    resource: Rendered,
    /// Counts the resources rendered into `resource` ([`SpanRow::resource_generation`]).
    resource_generation: u64,
    /// RowBinary only: `resource` serialized, once per resource.
    resource_bytes: rowbinary::ResourceBytes,
    span_attrs: Rendered,
    nested_attrs: Rendered,
    /// End times of the spans appended since the last [`Self::take_end_times`].
    end_times: EndTimes,
    /// The current record's end times, counted into `end_times` only once the record is in
    /// (a record taken back and read again by `prost` must not count twice).
    record_ends: Vec<u64>,
    /// The drop, redact and sample rules; `None` when there are none.
    processor: Option<Arc<Processor>>,
    process_scratch: process::Scratch,
    /// Where a record's redacted attribute bodies live until its rows are written.
    arena: Bump,
}

impl Encoder {
    /// An encoder for `table`'s insert columns in `format`, LZ4-compressed.
    pub fn new(table: &TableOptions, format: InsertFormat) -> Result<Self, EncodeError> {
        Self::with_options(table, EncoderOptions::new(format))
    }

    pub fn with_options(
        table: &TableOptions,
        mut options: EncoderOptions,
    ) -> Result<Self, EncodeError> {
        options.format = options.format.resolve(table.attributes);
        let plan = plan::plan(table)?;
        let bodies = BufPool::new(BODY_POOL_BUFFERS, BODY_POOL_MAX_CAPACITY);
        let rows = match options.format {
            // `resolve` never returns `Auto`.
            InsertFormat::RowBinary | InsertFormat::Auto => Rows::RowBinary,
            InsertFormat::Native => Rows::Native(NativeBlock::new(&plan)),
        };
        Ok(Self {
            options,
            insert_sql: insert_sql(table, options.format),
            plan,
            rows,
            raw: Vec::new(),
            body: bodies.take(),
            compressor: compress::Compressor::default(),
            bodies,
            row_count: 0,
            service_name: Vec::new(),
            mark_scratch: Vec::new(),
            resource: Rendered::new(table.attributes),
            resource_generation: 0,
            resource_bytes: rowbinary::ResourceBytes::default(),
            span_attrs: Rendered::new(table.attributes),
            nested_attrs: Rendered::new(table.attributes),
            end_times: EndTimes::default(),
            record_ends: Vec::new(),
            processor: None,
            process_scratch: process::Scratch::default(),
            arena: Bump::new(),
        })
    }

    /// Applies `processor`'s rules to every span from now on (none: every span is written).
    pub fn with_processor(mut self, processor: Arc<Processor>) -> Self {
        if !processor.is_empty() {
            self.process_scratch = processor.scratch();
            self.processor = Some(processor);
        }
        self
    }

    /// What each processing rule did to the records appended since the last call (empty
    /// without rules).
    pub fn drain_process_counts(&mut self) -> impl Iterator<Item = RuleCounts> + '_ {
        self.process_scratch.drain_counts()
    }

    /// How [`Encoder::finish`]'s bodies are compressed.
    pub fn compression(&self) -> Compression {
        self.options.compression
    }

    pub fn options(&self) -> EncoderOptions {
        self.options
    }

    /// `INSERT INTO db.table (cols…) FORMAT <format>`: the statement for [`Self::finish`]'s body.
    pub fn insert_sql(&self) -> &str {
        &self.insert_sql
    }

    /// The columns written, in order, with their types (the schema's insert columns).
    pub fn columns(&self) -> impl ExactSizeIterator<Item = (&'static str, &ClickHouseType)> + '_ {
        self.plan.iter().map(|c| (c.name, &c.ch_type))
    }

    /// Rows added since the last [`Self::finish`].
    pub fn rows(&self) -> usize {
        self.row_count
    }

    /// Bytes held for the current body (compressed so far plus not yet compressed),
    /// for batch sizing.
    pub fn buffered_bytes(&self) -> usize {
        let pending = match &self.rows {
            Rows::RowBinary => 0,
            Rows::Native(block) => block.data_len(),
        };
        self.body.len() + self.raw.len() + pending
    }

    /// Decodes one record payload and appends its spans. On error nothing is appended.
    ///
    /// `otlp_proto` records are read in place ([`proto`]); a record in a shape that
    /// reader does not take is decoded by `prost` and its canonical re-encoding read
    /// instead. `otlp_json` records are decoded to the `prost` message and re-encoded.
    pub fn push_record(
        &mut self,
        payload: &[u8],
        encoding: Encoding,
    ) -> Result<usize, DecodeError> {
        if encoding == Encoding::OtlpProto {
            match self.push_proto(payload) {
                Ok(n) => return Ok(n),
                Err(Stop::Expanded(bytes)) => return Err(self.expanded(bytes)),
                Err(Stop::Unusual) => {}
            }
        }
        let req = decode::decode(payload, encoding)?;
        self.push_request(&req)
    }

    fn expanded(&self, bytes: usize) -> DecodeError {
        DecodeError::Expanded {
            bytes,
            limit: self.options.max_expanded_record_bytes,
        }
    }

    /// Appends every span of `req` as a row; returns how many.
    pub fn push_request(&mut self, req: &ExportTraceServiceRequest) -> Result<usize, DecodeError> {
        let canonical = req.encode_to_vec();
        self.push_proto(&canonical).map_err(|stop| match stop {
            Stop::Unusual => DecodeError::Reencoded,
            Stop::Expanded(bytes) => self.expanded(bytes),
        })
    }

    /// Appends the spans of an `otlp_proto` record read in place; on [`proto::Unusual`]
    /// everything appended for it is taken back.
    fn push_proto(&mut self, payload: &[u8]) -> Result<usize, Stop> {
        let mark = self.mark();
        self.record_ends.clear();
        let mut arena = std::mem::take(&mut self.arena);
        arena.reset();
        let pushed = self.push_proto_inner(payload, &arena);
        self.arena = arena;
        self.process_scratch.end_record(pushed.is_ok());
        match pushed {
            Ok(n) => {
                self.end_times
                    .record_all(&self.record_ends, freshness::unix_now_ns);
                if let Rows::Native(block) = &self.rows
                    && block.data_len() >= self.options.native_block_bytes
                {
                    self.cut_block();
                }
                self.compress_full_frames();
                Ok(n)
            }
            Err(e) => {
                self.rollback(mark);
                Err(e)
            }
        }
    }

    fn mark(&mut self) -> Mark {
        let mut native = std::mem::take(&mut self.mark_scratch);
        native.clear();
        if let Rows::Native(block) = &self.rows {
            block.mark(&mut native);
        }
        Mark {
            raw: self.raw.len(),
            rows: self.row_count,
            native,
        }
    }

    fn rollback(&mut self, mark: Mark) {
        self.raw.truncate(mark.raw);
        self.row_count = mark.rows;
        if let Rows::Native(block) = &mut self.rows {
            block.rollback(&mark.native);
        }
        self.mark_scratch = mark.native;
    }

    /// The bytes the current record's rows took so far, from where `mark` was taken.
    fn grown_since(&self, raw_mark: usize, native_mark: usize) -> usize {
        let native = match &self.rows {
            Rows::RowBinary => 0,
            Rows::Native(block) => block.data_len().saturating_sub(native_mark),
        };
        self.raw.len().saturating_sub(raw_mark) + native
    }

    /// Appends the rows of `payload`'s spans; redacted attribute bodies go in `arena`.
    fn push_proto_inner<'r>(&mut self, payload: &'r [u8], arena: &'r Bump) -> Result<usize, Stop> {
        let before = self.row_count;
        let raw_mark = self.raw.len();
        let native_mark = match &self.rows {
            Rows::RowBinary => 0,
            Rows::Native(block) => block.data_len(),
        };
        let mut resource_spans = Vec::new();
        proto::request(payload, &mut resource_spans)?;
        let mut resource = ResourceView::default();
        let mut scopes = Vec::new();
        let mut scope = ScopeView::default();
        let mut lists = SpanScratch::default();
        for rs in resource_spans {
            proto::resource_spans(rs, &mut resource, &mut scopes)?;
            if let Some(p) = &self.processor {
                p.resource(&mut resource.attrs, arena, &mut self.process_scratch)?;
            }
            // Once per resource: every span of it shares these values.
            rows::service_name(&resource.attrs, &mut self.service_name)?;
            self.resource_generation += 1;
            self.resource
                .fill(&resource.attrs, proto::RESOURCE_VALUE_DEPTH)?;
            if matches!(self.rows, Rows::RowBinary) {
                self.resource_bytes.fill(&self.resource);
            }
            for ss in &scopes {
                proto::scope_spans(ss, &mut scope)?;
                for body in &scope.spans {
                    let mut span = proto::span(body, &mut lists)?;
                    if let Some(p) = &self.processor
                        && p.span(
                            &mut span,
                            scope.name,
                            &mut lists,
                            arena,
                            &mut self.process_scratch,
                        )? == Verdict::Skip
                    {
                        continue;
                    }
                    self.record_ends.push(span.end_time_unix_nano);
                    self.span_attrs
                        .fill(&lists.attrs, proto::SPAN_VALUE_DEPTH)?;
                    let row = SpanRow {
                        span: &span,
                        lists: &lists,
                        service_name: &self.service_name,
                        scope_name: scope.name,
                        scope_version: scope.version,
                        resource: &self.resource,
                        resource_generation: self.resource_generation,
                        attrs: &self.span_attrs,
                    };
                    match &mut self.rows {
                        Rows::RowBinary => rowbinary::write_row(
                            &mut self.raw,
                            &self.plan,
                            &row,
                            &self.resource_bytes,
                            &mut self.nested_attrs,
                        )?,
                        Rows::Native(block) => block.push_row(&row, &mut self.nested_attrs)?,
                    }
                    self.row_count += 1;
                    if (self.row_count - before).is_multiple_of(EXPANSION_CHECK_ROWS) {
                        let grown = self.grown_since(raw_mark, native_mark);
                        if grown > self.options.max_expanded_record_bytes {
                            return Err(Stop::Expanded(grown));
                        }
                    }
                }
            }
        }
        let grown = self.grown_since(raw_mark, native_mark);
        if grown > self.options.max_expanded_record_bytes {
            return Err(Stop::Expanded(grown));
        }
        Ok(self.row_count - before)
    }

    /// Compresses whole 1 MiB frames as soon as they are available, so the raw buffer
    /// stays small and only the (smaller) compressed body grows with the batch.
    fn compress_full_frames(&mut self) {
        compress_full_frames(
            self.options.compression,
            &mut self.compressor,
            &mut self.raw,
            &mut self.body,
        );
    }

    /// Writes the Native block being built into the raw buffer, compressing whole frames
    /// column by column.
    fn cut_block(&mut self) {
        let Rows::Native(block) = &mut self.rows else {
            return;
        };
        let (compression, compressor, body) = (
            self.options.compression,
            &mut self.compressor,
            &mut self.body,
        );
        block.cut(&mut self.raw, &mut |raw: &mut Vec<u8>| {
            compress_full_frames(compression, compressor, raw, body);
        });
    }

    /// Takes the end times of the spans appended since the last call (for
    /// `tracehouse_span_freshness_seconds`, once their insert is acknowledged).
    pub fn take_end_times(&mut self) -> EndTimes {
        std::mem::take(&mut self.end_times)
    }

    /// Takes the body of everything appended since the last call and starts a new one.
    /// Empty when no row was appended.
    pub fn finish(&mut self) -> Bytes {
        self.cut_block();
        self.row_count = 0;
        match self.options.compression {
            Compression::None => {
                // The next body starts with the same capacity so a steady stream of
                // batches does not grow its buffer step by step again.
                let next = Vec::with_capacity(self.raw.len());
                Bytes::from(std::mem::replace(&mut self.raw, next))
            }
            Compression::Lz4 => {
                self.compressor
                    .compress_into(&self.raw, self.body.vec_mut());
                self.raw.clear();
                if self.body.is_empty() {
                    return Bytes::new();
                }
                // The body leaves as `Bytes` that hands its buffer back to `bodies` when
                // the last clone is dropped (after the insert). The next body starts from
                // a recycled buffer when one is back, with at least this one's capacity.
                let mut next = self.bodies.take();
                next.vec_mut().reserve(self.body.len());
                Bytes::from_owner(std::mem::replace(&mut self.body, next))
            }
        }
    }
}

/// Compresses the whole 1 MiB frames at the front of `raw` into `body` and drains them
/// (nothing without compression: the raw buffer is then the body).
fn compress_full_frames(
    compression: Compression,
    compressor: &mut compress::Compressor,
    raw: &mut Vec<u8>,
    body: &mut PooledBuf,
) {
    if compression == Compression::None || raw.len() < compress::MAX_BLOCK {
        return;
    }
    let whole = raw.len() - raw.len() % compress::MAX_BLOCK;
    compressor.compress_into(&raw[..whole], body.vec_mut());
    raw.drain(..whole);
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod differential;
#[cfg(test)]
mod fuzz;
