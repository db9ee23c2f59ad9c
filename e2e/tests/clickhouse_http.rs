//! The local ClickHouse endpoint is the real engine behind a ClickHouse-compatible HTTP
//! interface: the unmodified `clickhouse` crate creates tables with the column types the
//! traces table needs, inserts LZ4-compressed RowBinary and reads the rows back.
#![cfg(feature = "stack-tests")]

use std::collections::BTreeMap;

use clickhouse::Row;
use serde::{Deserialize, Serialize};
use tracehouse_e2e::{clickhouse, stack_var, unique_name};

#[derive(Debug, Clone, PartialEq, Row, Serialize, Deserialize)]
struct SpanLike {
    #[serde(rename = "Timestamp")]
    timestamp_ns: i64,
    #[serde(rename = "ServiceName")]
    service: String,
    #[serde(rename = "Attributes")]
    attributes: BTreeMap<String, String>,
    /// A JSON column, sent and read as JSON text (the crate's string mode for JSON).
    #[serde(rename = "Doc")]
    doc: String,
    #[serde(rename = "Events.Name")]
    event_names: Vec<String>,
    #[serde(rename = "Events.Timestamp")]
    event_times: Vec<i64>,
}

async fn fresh_database(client: &::clickhouse::Client) -> String {
    let db = unique_name("e2e_ch");
    client
        .query(&format!("CREATE DATABASE {db}"))
        .execute()
        .await
        .unwrap();
    db
}

fn rows() -> Vec<SpanLike> {
    (0..1000)
        .map(|i| SpanLike {
            timestamp_ns: 1_700_000_000_123_456_789 + i,
            service: format!("svc-{}", i % 5),
            attributes: BTreeMap::from([
                ("http.method".to_string(), "GET".to_string()),
                ("ünï".to_string(), format!("välue {i}")),
            ]),
            doc: format!(r#"{{"a":{{"b":{i}}},"s":"x{i}"}}"#),
            event_names: vec!["start".into(), format!("e{i}")],
            event_times: vec![1_700_000_000_000_000_001, 1_700_000_000_000_000_002 + i],
        })
        .collect()
}

#[tokio::test]
async fn json_map_datetime64_nested_roundtrip_lz4() {
    let base = clickhouse();
    let db = fresh_database(&base).await;
    let client = base
        .with_database(&db)
        .with_setting("input_format_binary_read_json_as_string", "1")
        .with_setting("output_format_binary_write_json_as_string", "1")
        .with_validation(false);
    client
        .query(
            "CREATE TABLE spans (
                Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
                ServiceName LowCardinality(String),
                Attributes Map(LowCardinality(String), String),
                Doc JSON,
                Events Nested(Name LowCardinality(String), Timestamp DateTime64(9))
            ) ENGINE = MergeTree ORDER BY (ServiceName, Timestamp)",
        )
        .execute()
        .await
        .unwrap();

    let sent = rows();
    let mut insert = client.insert::<SpanLike>("spans").await.unwrap();
    for row in &sent {
        insert.write(row).await.unwrap();
    }
    insert.end().await.unwrap();

    let got = client
        .query("SELECT ?fields FROM spans ORDER BY Timestamp")
        .fetch_all::<SpanLike>()
        .await
        .unwrap();
    assert_eq!(got.len(), sent.len());
    for (g, s) in got.iter().zip(&sent) {
        let (gd, sd): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&g.doc).unwrap(),
            serde_json::from_str(&s.doc).unwrap(),
        );
        assert_eq!(gd, sd, "JSON column differs");
        assert_eq!(
            SpanLike {
                doc: String::new(),
                ..g.clone()
            },
            SpanLike {
                doc: String::new(),
                ..s.clone()
            }
        );
    }

    // The engine really typed the columns: ask it.
    let types = client
        .query("SELECT toTypeName(Timestamp), toTypeName(Attributes), toTypeName(Doc), toTypeName(`Events.Name`) FROM spans LIMIT 1")
        .fetch_one::<(String, String, String, String)>()
        .await
        .unwrap();
    assert_eq!(
        types,
        (
            "DateTime64(9)".to_string(),
            "Map(LowCardinality(String), String)".to_string(),
            "JSON".to_string(),
            "Array(LowCardinality(String))".to_string()
        )
    );
    let b: u64 = client
        .query("SELECT sum(Doc.a.b::Int64) FROM spans")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(b, (0..1000).sum::<u64>());
    tracehouse_e2e::drop_database(&db).await;
}

#[tokio::test]
async fn null_engine_accepts_inserts_and_stores_nothing() {
    let base = clickhouse();
    let db = fresh_database(&base).await;
    let client = base
        .with_database(&db)
        .with_setting("input_format_binary_read_json_as_string", "1");
    client
        .query(
            "CREATE TABLE sink (Timestamp DateTime64(9), ServiceName LowCardinality(String),
             Attributes Map(LowCardinality(String), String), Doc JSON,
             Events Nested(Name LowCardinality(String), Timestamp DateTime64(9))) ENGINE = Null",
        )
        .execute()
        .await
        .unwrap();
    let mut insert = client.insert::<SpanLike>("sink").await.unwrap();
    for row in rows() {
        insert.write(&row).await.unwrap();
    }
    insert.end().await.unwrap();
    let n: u64 = client
        .query("SELECT count() FROM sink")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(n, 0);
    tracehouse_e2e::drop_database(&db).await;
}

/// POST raw bytes to the HTTP interface the way any client would, returning status, error
/// code header and body.
async fn post(query: &str, body: Vec<u8>) -> (u16, Option<String>, String) {
    post_with(query, "", body).await
}

/// `post` with extra URL parameters (`&name=value…`).
async fn post_with(
    query: &str,
    extra_params: &str,
    body: Vec<u8>,
) -> (u16, Option<String>, String) {
    let url = format!(
        "{}/?query={}{extra_params}",
        stack_var("CLICKHOUSE_URL"),
        urlencode(query)
    );
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-o", "-", "-D", "/dev/stderr", "--data-binary", "@-"])
        .arg("-H")
        .arg(format!(
            "X-ClickHouse-User: {}",
            stack_var("CLICKHOUSE_USER")
        ))
        .arg("-H")
        .arg(format!(
            "X-ClickHouse-Key: {}",
            stack_var("CLICKHOUSE_PASSWORD")
        ))
        .arg(url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("curl");
    let mut child = out;
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&body).await.unwrap();
    }
    let out = child.wait_with_output().await.unwrap();
    let headers = String::from_utf8_lossy(&out.stderr).to_string();
    let status = headers
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let code = headers
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("x-clickhouse-exception-code:")
        })
        .map(|l| l.split(':').nth(1).unwrap().trim().to_string());
    (
        status,
        code,
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn malformed_rowbinary_is_refused_with_its_code_and_changes_nothing() {
    let base = clickhouse();
    let db = fresh_database(&base).await;
    let client = base.with_database(&db);
    client
        .query("CREATE TABLE t (a UInt64, s String) ENGINE = MergeTree ORDER BY a")
        .execute()
        .await
        .unwrap();
    client
        .query("INSERT INTO t VALUES (1, 'one')")
        .execute()
        .await
        .unwrap();

    // Two good rows then a string whose length prefix runs past the end of the body.
    let mut body = Vec::new();
    for (a, s) in [(2u64, "two"), (3, "three")] {
        body.extend_from_slice(&a.to_le_bytes());
        body.push(s.len() as u8);
        body.extend_from_slice(s.as_bytes());
    }
    body.extend_from_slice(&4u64.to_le_bytes());
    body.push(100);
    body.extend_from_slice(b"short");
    let (status, code, text) = post(&format!("INSERT INTO {db}.t FORMAT RowBinary"), body).await;
    assert_eq!(code.as_deref(), Some("33"), "status {status}, body {text}");
    assert!(text.starts_with("Code: 33. DB::Exception:"), "{text}");
    assert!(status >= 400, "status {status}");

    let rows = client
        .query("SELECT a, s FROM t ORDER BY a")
        .fetch_all::<(u64, String)>()
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![(1, "one".to_string())],
        "a failed insert must leave the table unchanged"
    );

    // The same error reaches the crate as a typed error carrying the code.
    let err = client
        .query("SELECT * FROM no_such_table")
        .fetch_all::<(u64, String)>()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Code: 60"), "{err}");
    tracehouse_e2e::drop_database(&db).await;
}

#[tokio::test]
async fn wrong_password_gets_code_516() {
    let client = ::clickhouse::Client::default()
        .with_url(stack_var("CLICKHOUSE_URL"))
        .with_user(stack_var("CLICKHOUSE_USER"))
        .with_password("not-the-password");
    let err = client
        .query("SELECT 1")
        .fetch_one::<u8>()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("Code: 516"), "{err}");
}

/// One ClickHouse compressed block as `decompress=1` bodies carry it:
/// `[CityHash128 v1.0.2 of the rest][method][u32 LE size incl. 9-byte header][u32 LE plain size][data]`,
/// here with method 0x02 (stored uncompressed).
fn uncompressed_block(data: &[u8]) -> Vec<u8> {
    let mut rest = vec![0x02u8];
    rest.extend_from_slice(&u32::try_from(data.len() + 9).unwrap().to_le_bytes());
    rest.extend_from_slice(&u32::try_from(data.len()).unwrap().to_le_bytes());
    rest.extend_from_slice(data);
    // In the byte order ClickHouse uses (the clickhouse crate writes it the same way).
    let checksum = cityhash_rs::cityhash_102_128(&rest).rotate_right(64);
    let mut block = checksum.to_le_bytes().to_vec();
    block.extend_from_slice(&rest);
    block
}

#[tokio::test]
async fn corrupted_block_checksum_is_refused_with_code_40_and_changes_nothing() {
    let base = clickhouse();
    let db = fresh_database(&base).await;
    let client = base.with_database(&db);
    client
        .query("CREATE TABLE t (a UInt64, s String) ENGINE = MergeTree ORDER BY a")
        .execute()
        .await
        .unwrap();
    client
        .query("INSERT INTO t VALUES (1, 'one')")
        .execute()
        .await
        .unwrap();

    let mut rows = Vec::new();
    for (a, s) in [(2u64, "two"), (3, "three")] {
        rows.extend_from_slice(&a.to_le_bytes());
        rows.push(u8::try_from(s.len()).unwrap());
        rows.extend_from_slice(s.as_bytes());
    }
    let good = uncompressed_block(&rows);
    let query = format!("INSERT INTO {db}.t FORMAT RowBinary");

    // One flipped bit in the stored checksum: refused before any row reaches the table.
    let mut corrupted = good.clone();
    corrupted[5] ^= 0x04;
    let (status, code, text) = post_with(&query, "&decompress=1", corrupted).await;
    assert_eq!(code.as_deref(), Some("40"), "status {status}, body {text}");
    assert!(
        text.starts_with("Code: 40. DB::Exception: Checksum doesn't match"),
        "{text}"
    );
    assert!(status >= 400, "status {status}");
    // The same with the data corrupted after the checksum was taken.
    let mut corrupted = good.clone();
    let last = corrupted.len() - 1;
    corrupted[last] ^= 0x01;
    let (status, code, text) = post_with(&query, "&decompress=1", corrupted).await;
    assert_eq!(code.as_deref(), Some("40"), "status {status}, body {text}");

    let got = client
        .query("SELECT a, s FROM t ORDER BY a")
        .fetch_all::<(u64, String)>()
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![(1, "one".to_string())],
        "a refused insert must leave the table unchanged"
    );

    // The very same block with its checksum intact is accepted: the refusal was the checksum.
    let (status, code, text) = post_with(&query, "&decompress=1", good).await;
    assert_eq!((status, code), (200, None), "{text}");
    let got = client
        .query("SELECT a, s FROM t ORDER BY a")
        .fetch_all::<(u64, String)>()
        .await
        .unwrap();
    assert_eq!(
        got,
        vec![
            (1, "one".to_string()),
            (2, "two".to_string()),
            (3, "three".to_string())
        ]
    );
    tracehouse_e2e::drop_database(&db).await;
}

#[derive(Debug, PartialEq, Row, Deserialize)]
struct Params {
    s: String,
    n: u64,
    arr: Vec<String>,
}

/// The crate sends server-side `{name:Type}` parameters in a multipart/form-data body (fields
/// `query` and `param_*`), which ClickHouse's HTTP interface reads like URL parameters.
#[tokio::test]
async fn server_side_parameters_in_a_multipart_body() {
    let client = clickhouse();
    let got: Params = client
        .query("SELECT {s:String} AS s, {n:UInt64} + 1 AS n, {arr:Array(String)} AS arr")
        .param("s", "it's a \"test\"\twith\\escapes")
        .param("n", 41u64)
        .param("arr", vec!["a", "b'c"])
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(
        got,
        Params {
            s: "it's a \"test\"\twith\\escapes".to_string(),
            n: 42,
            arr: vec!["a".to_string(), "b'c".to_string()],
        }
    );
    let count: u64 = client
        .query("SELECT count() FROM system.{tbl:Identifier}")
        .param("tbl", "one")
        .fetch_one()
        .await
        .unwrap();
    assert_eq!(count, 1);
}
