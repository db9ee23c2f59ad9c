// Package gocompat proves that the unmodified Go ClickHouse driver (clickhouse-go v2, the one
// the OpenTelemetry Collector's ClickHouse exporter uses) works against chserver over HTTP.
//
// Run against the local stack:
//
//	eval "$(e2e/stack env)"
//	(cd e2e/chserver/gocompat && go test -count=1 ./...)
package gocompat

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// stack is the ClickHouse endpoint of the local stack, from `e2e/stack env`.
type stack struct {
	addr, user, password string
}

func stackEnv(t *testing.T) stack {
	t.Helper()
	var s stack
	raw := os.Getenv("CLICKHOUSE_URL")
	s.user = os.Getenv("CLICKHOUSE_USER")
	s.password = os.Getenv("CLICKHOUSE_PASSWORD")
	if raw == "" || s.user == "" || s.password == "" {
		t.Fatal("CLICKHOUSE_URL, CLICKHOUSE_USER and CLICKHOUSE_PASSWORD must be set: " +
			`run eval "$(e2e/stack env)" first (and e2e/stack up clickhouse if the stack is down)`)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		t.Fatalf("CLICKHOUSE_URL=%q: want http://host:port", raw)
	}
	s.addr = u.Host
	return s
}

// wire records what went over the wire, so the tests can check that the driver really used
// the compression it was asked for (and not a silent plain fallback).
type wire struct {
	mu       sync.Mutex
	requests []wireExchange
}

type wireExchange struct {
	query           url.Values
	contentEncoding string // of the request
	acceptEncoding  string
	respEncoding    string // Content-Encoding of the response
	status          int
	exceptionCode   string // X-ClickHouse-Exception-Code of the response
}

func (w *wire) transport(rt *http.Transport) (http.RoundTripper, error) {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		res, err := rt.RoundTrip(req)
		if err != nil {
			return res, err
		}
		w.mu.Lock()
		w.requests = append(w.requests, wireExchange{
			query:           req.URL.Query(),
			contentEncoding: req.Header.Get("Content-Encoding"),
			acceptEncoding:  req.Header.Get("Accept-Encoding"),
			respEncoding:    res.Header.Get("Content-Encoding"),
			status:          res.StatusCode,
			exceptionCode:   res.Header.Get("X-ClickHouse-Exception-Code"),
		})
		w.mu.Unlock()
		return res, nil
	}), nil
}

func (w *wire) all() []wireExchange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]wireExchange(nil), w.requests...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// compressions are the methods clickhouse-go offers over HTTP. LZ4 and ZSTD are ClickHouse's
// block framing (`decompress=1` / `compress=1`); gzip, deflate and br are HTTP
// Content-Encoding (responses compressed only with `enable_http_compression=1`, as ClickHouse
// documents).
var compressions = []struct {
	name   string
	method clickhouse.CompressionMethod
}{
	{"none", clickhouse.CompressionNone},
	{"lz4", clickhouse.CompressionLZ4},
	{"zstd", clickhouse.CompressionZSTD},
	{"gzip", clickhouse.CompressionGZIP},
	{"deflate", clickhouse.CompressionDeflate},
	{"br", clickhouse.CompressionBrotli},
}

func options(s stack, method clickhouse.CompressionMethod, database string, w *wire) *clickhouse.Options {
	opt := &clickhouse.Options{
		Protocol:    clickhouse.HTTP,
		Addr:        []string{s.addr},
		Auth:        clickhouse.Auth{Database: database, Username: s.user, Password: s.password},
		Compression: &clickhouse.Compression{Method: method},
		DialTimeout: 10 * time.Second,
		ReadTimeout: 60 * time.Second,
	}
	switch method {
	case clickhouse.CompressionGZIP, clickhouse.CompressionDeflate, clickhouse.CompressionBrotli:
		opt.Settings = clickhouse.Settings{"enable_http_compression": 1}
	}
	if w != nil {
		opt.TransportFunc = w.transport
	}
	return opt
}

func open(t *testing.T, opt *clickhouse.Options) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(opt)
	if err != nil {
		t.Fatalf("clickhouse.Open: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func openDB(t *testing.T, opt *clickhouse.Options) *sql.DB {
	t.Helper()
	db := clickhouse.OpenDB(opt)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// freshDatabase creates a uniquely named database (dropped at the end of the test).
func freshDatabase(t *testing.T, s stack) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "gocompat_" + hex.EncodeToString(b)
	conn := open(t, options(s, clickhouse.CompressionNone, "", nil))
	ctx := ctxT(t)
	if err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("CREATE DATABASE: %v", err)
	}
	t.Cleanup(func() {
		c, err := clickhouse.Open(options(s, clickhouse.CompressionNone, "", nil))
		if err == nil {
			_ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name)
			_ = c.Close()
		}
	})
	return name
}

// ---------------------------------------------------------------------------------------------
// (a)(b)(c) open + ping, native API and database/sql, every compression
// ---------------------------------------------------------------------------------------------

func TestPing(t *testing.T) {
	s := stackEnv(t)
	for _, c := range compressions {
		t.Run(c.name+"/native", func(t *testing.T) {
			conn := open(t, options(s, c.method, "", nil))
			if err := conn.Ping(ctxT(t)); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			v, err := conn.ServerVersion()
			if err != nil {
				t.Fatalf("ServerVersion: %v", err)
			}
			if v.Version.Major < 24 || v.Revision == 0 || v.Timezone == nil {
				t.Fatalf("server hello looks wrong: %+v", v)
			}
		})
		t.Run(c.name+"/database-sql", func(t *testing.T) {
			db := openDB(t, options(s, c.method, "", nil))
			if err := db.PingContext(ctxT(t)); err != nil {
				t.Fatalf("PingContext: %v", err)
			}
			var one uint8
			if err := db.QueryRowContext(ctxT(t), "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("SELECT 1: %v %v", one, err)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// (d) OTel-traces-shaped table: Native INSERT over HTTP (PrepareBatch/Append/Send), read back
// ---------------------------------------------------------------------------------------------

const spansDDL = `CREATE TABLE spans (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    SpanAttributes JSON CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        Attributes JSON
    ) CODEC(ZSTD(1))
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)`

// The INSERT the exporter writes (it names the Nested sub-columns); the driver turns it into
// `INSERT INTO … FORMAT Native` and sends the rows as a Native block in the body.
const spansInsert = `INSERT INTO spans (Timestamp, TraceId, SpanName, ServiceName, ResourceAttributes,
    SpanAttributes, Duration, Events.Timestamp, Events.Name, Events.Attributes, Links.TraceId, Links.Attributes)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

const spansSelect = `SELECT Timestamp, TraceId, SpanName, ServiceName, ResourceAttributes, SpanAttributes,
    Duration, Events.Timestamp, Events.Name, Events.Attributes FROM spans ORDER BY Timestamp`

type span struct {
	ts         time.Time
	traceID    string
	name       string
	service    string
	resource   map[string]string
	attrs      string // JSON text
	duration   uint64
	eventTimes []time.Time
	eventNames []string
	eventAttrs []map[string]string
	linkIDs    []string
	linkAttrs  []string // JSON texts, appended as strings the way the exporter's JSON schema does
}

func spans(n int) []span {
	base := time.Unix(1_700_000_000, 123_456_789).UTC()
	out := make([]span, n)
	for i := range out {
		out[i] = span{
			ts:       base.Add(time.Duration(i) * time.Microsecond).Add(time.Duration(i%1000) * time.Nanosecond),
			traceID:  fmt.Sprintf("%032x", i*7919),
			name:     fmt.Sprintf("GET /api/%d", i%7),
			service:  fmt.Sprintf("svc-%d", i%5),
			resource: map[string]string{"host.name": fmt.Sprintf("node-%d", i%3), "ünï": "välue"},
			attrs: fmt.Sprintf(`{"http":{"status_code":%d,"method":"GET"},"user":"u%d","ok":%t,"tags":["a","b%d"]}`,
				200+i%5, i, i%2 == 0, i),
			duration:   uint64(i) * 1_000_003,
			eventTimes: []time.Time{base, base.Add(time.Duration(i) + 1)},
			eventNames: []string{"start", fmt.Sprintf("e%d", i)},
			eventAttrs: []map[string]string{{}, {"k": fmt.Sprintf("v%d", i), "quote": `it's "q"`}},
			linkIDs:    []string{fmt.Sprintf("%032x", i+1)},
			linkAttrs:  []string{fmt.Sprintf(`{"link":{"n":%d},"kind":"child"}`, i)},
		}
	}
	return out
}

func (s span) args() []any {
	return []any{s.ts, s.traceID, s.name, s.service, s.resource, s.attrs, s.duration, s.eventTimes, s.eventNames, s.eventAttrs, s.linkIDs, s.linkAttrs}
}

// equalSpan compares a row read back with the one sent; JSON is compared as parsed values
// because the engine canonicalises it (key order, number types).
func equalSpan(t *testing.T, i int, got, want span) {
	t.Helper()
	if !sameJSON(got.attrs, want.attrs) {
		t.Fatalf("row %d: JSON column: got %s, want %s", i, got.attrs, want.attrs)
	}
	if len(got.linkAttrs) != len(want.linkAttrs) {
		t.Fatalf("row %d: Links.Attributes %v != %v", i, got.linkAttrs, want.linkAttrs)
	}
	for k := range got.linkAttrs {
		if !sameJSON(got.linkAttrs[k], want.linkAttrs[k]) {
			t.Fatalf("row %d: Links.Attributes[%d]: got %s, want %s", i, k, got.linkAttrs[k], want.linkAttrs[k])
		}
	}
	got.linkAttrs, want.linkAttrs = nil, nil
	if !got.ts.Equal(want.ts) {
		t.Fatalf("row %d: Timestamp %s != %s", i, got.ts.Format(time.RFC3339Nano), want.ts.Format(time.RFC3339Nano))
	}
	if len(got.eventTimes) != len(want.eventTimes) {
		t.Fatalf("row %d: Events.Timestamp %v != %v", i, got.eventTimes, want.eventTimes)
	}
	for k := range got.eventTimes {
		if !got.eventTimes[k].Equal(want.eventTimes[k]) {
			t.Fatalf("row %d: Events.Timestamp[%d] %v != %v", i, k, got.eventTimes[k], want.eventTimes[k])
		}
	}
	got.ts, want.ts, got.attrs, want.attrs, got.eventTimes, want.eventTimes = time.Time{}, time.Time{}, "", "", nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("row %d differs:\n got  %+v\n want %+v", i, got, want)
	}
}

func sameJSON(got, want string) bool {
	var g, w any
	if json.Unmarshal([]byte(got), &g) != nil || json.Unmarshal([]byte(want), &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

// linksSelect reads the Array(JSON) column as JSON text (the engine writes JSON as strings in
// Native when output_format_native_write_json_as_string=1).
const linksSelect = `SELECT Links.TraceId, Links.Attributes FROM spans ORDER BY Timestamp`

func jsonAsString(ctx context.Context) context.Context {
	return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
		"output_format_native_write_json_as_string": 1,
	}))
}

const roundTripRows = 3000

func TestTracesRoundTripNative(t *testing.T) {
	s := stackEnv(t)
	for _, c := range compressions {
		t.Run(c.name, func(t *testing.T) {
			db := freshDatabase(t, s)
			w := &wire{}
			conn := open(t, options(s, c.method, db, w))
			ctx := ctxT(t)
			if err := conn.Exec(ctx, spansDDL); err != nil {
				t.Fatalf("CREATE TABLE: %v", err)
			}
			sent := spans(roundTripRows)
			batch, err := conn.PrepareBatch(ctx, spansInsert)
			if err != nil {
				t.Fatalf("PrepareBatch: %v", err)
			}
			for _, r := range sent {
				if err := batch.Append(r.args()...); err != nil {
					t.Fatalf("Append: %v", err)
				}
			}
			if err := batch.Send(); err != nil {
				t.Fatalf("Send: %v", err)
			}

			// The JSON column is read in its native (object) serialization here …
			rows, err := conn.Query(ctx, spansSelect)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			var got []span
			for rows.Next() {
				var r span
				var attrs map[string]any
				if err := rows.Scan(&r.ts, &r.traceID, &r.name, &r.service, &r.resource, &attrs,
					&r.duration, &r.eventTimes, &r.eventNames, &r.eventAttrs); err != nil {
					t.Fatalf("Scan: %v", err)
				}
				b, _ := json.Marshal(attrs)
				r.attrs = string(b)
				got = append(got, r)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("rows: %v", err)
			}
			_ = rows.Close()
			if len(got) != len(sent) {
				t.Fatalf("read %d rows, sent %d", len(got), len(sent))
			}
			links, err := conn.Query(jsonAsString(ctx), linksSelect)
			if err != nil {
				t.Fatalf("Query links: %v", err)
			}
			for i := 0; links.Next(); i++ {
				if err := links.Scan(&got[i].linkIDs, &got[i].linkAttrs); err != nil {
					t.Fatalf("Scan links: %v", err)
				}
			}
			if err := links.Err(); err != nil {
				t.Fatalf("links: %v", err)
			}
			_ = links.Close()
			for i := range sent {
				equalSpan(t, i, got[i], sent[i])
			}

			// … and as a string when the client asks for it.
			var text string
			if err := conn.QueryRow(jsonAsString(ctx), "SELECT SpanAttributes FROM spans ORDER BY Timestamp LIMIT 1").Scan(&text); err != nil {
				t.Fatalf("JSON as string: %v", err)
			}
			equalSpan(t, 0, span{ts: sent[0].ts, attrs: text}, span{ts: sent[0].ts, attrs: sent[0].attrs})

			// The engine really typed the columns.
			var tsType, attrType, jsonType, evType, linkType string
			if err := conn.QueryRow(ctx, "SELECT toTypeName(Timestamp), toTypeName(ResourceAttributes), "+
				"toTypeName(SpanAttributes), toTypeName(Events.Attributes), toTypeName(Links.Attributes) FROM spans LIMIT 1").
				Scan(&tsType, &attrType, &jsonType, &evType, &linkType); err != nil {
				t.Fatalf("types: %v", err)
			}
			if tsType != "DateTime64(9)" || attrType != "Map(LowCardinality(String), String)" || jsonType != "JSON" ||
				evType != "Array(Map(LowCardinality(String), String))" || linkType != "Array(JSON)" {
				t.Fatalf("types: %s, %s, %s, %s, %s", tsType, attrType, jsonType, evType, linkType)
			}
			checkWire(t, c.method, w.all())
		})
	}
}

// checkWire asserts that the requests and responses really were compressed as configured.
func checkWire(t *testing.T, method clickhouse.CompressionMethod, ex []wireExchange) {
	t.Helper()
	var inserts, compressedResponses, compressedQueries int
	for _, e := range ex {
		isInsert := strings.HasPrefix(strings.ToUpper(strings.TrimSpace(e.query.Get("query"))), "INSERT")
		if isInsert {
			inserts++
		}
		switch method {
		case clickhouse.CompressionLZ4, clickhouse.CompressionZSTD:
			// The driver asks for compressed results on queries and inserts (not on Exec).
			if e.query.Get("compress") == "1" && !isInsert {
				compressedQueries++
			}
			if isInsert && (e.query.Get("decompress") != "1" || e.query.Get("compress") != "1") {
				t.Errorf("insert without decompress=1&compress=1: %v", e.query)
			}
		case clickhouse.CompressionGZIP, clickhouse.CompressionDeflate, clickhouse.CompressionBrotli:
			want := map[clickhouse.CompressionMethod]string{
				clickhouse.CompressionGZIP: "gzip", clickhouse.CompressionDeflate: "deflate", clickhouse.CompressionBrotli: "br",
			}[method]
			if isInsert && e.contentEncoding != want {
				t.Errorf("insert sent with Content-Encoding %q, want %q", e.contentEncoding, want)
			}
			if e.respEncoding == want {
				compressedResponses++
			}
		}
	}
	if inserts == 0 {
		t.Errorf("no INSERT request seen on the wire")
	}
	switch method {
	case clickhouse.CompressionLZ4, clickhouse.CompressionZSTD:
		if compressedQueries == 0 {
			t.Errorf("no query asked for a compressed result")
		}
	case clickhouse.CompressionGZIP, clickhouse.CompressionDeflate, clickhouse.CompressionBrotli:
		if compressedResponses == 0 {
			t.Errorf("no response came back HTTP-compressed")
		}
	}
}

func TestTracesRoundTripDatabaseSQL(t *testing.T) {
	s := stackEnv(t)
	for _, c := range compressions {
		t.Run(c.name, func(t *testing.T) {
			dbName := freshDatabase(t, s)
			w := &wire{}
			db := openDB(t, options(s, c.method, dbName, w))
			ctx := ctxT(t)
			if _, err := db.ExecContext(ctx, spansDDL); err != nil {
				t.Fatalf("CREATE TABLE: %v", err)
			}
			sent := spans(roundTripRows)
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("Begin: %v", err)
			}
			stmt, err := tx.PrepareContext(ctx, spansInsert)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			for _, r := range sent {
				if _, err := stmt.ExecContext(ctx, r.args()...); err != nil {
					t.Fatalf("Exec (append): %v", err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatalf("Commit (send): %v", err)
			}

			rows, err := db.QueryContext(jsonAsString(ctx), spansSelect)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			var got []span
			for rows.Next() {
				var r span
				if err := rows.Scan(&r.ts, &r.traceID, &r.name, &r.service, &r.resource, &r.attrs,
					&r.duration, &r.eventTimes, &r.eventNames, &r.eventAttrs); err != nil {
					t.Fatalf("Scan: %v", err)
				}
				got = append(got, r)
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("rows: %v", err)
			}
			_ = rows.Close()
			if len(got) != len(sent) {
				t.Fatalf("read %d rows, sent %d", len(got), len(sent))
			}
			// Array(JSON) in its object serialization here (clickhouse-go v2.43's database/sql
			// rows panic on Array(JSON) in the string serialization: stdRows.Next → Array.Row on
			// a zero reflect.Value, a driver bug; the native API test reads that form).
			links, err := db.QueryContext(ctx, linksSelect)
			if err != nil {
				t.Fatalf("Query links: %v", err)
			}
			for i := 0; links.Next(); i++ {
				var attrs any
				if err := links.Scan(&got[i].linkIDs, &attrs); err != nil {
					t.Fatalf("Scan links: %v", err)
				}
				objs, ok := attrs.([]clickhouse.JSON)
				if !ok {
					t.Fatalf("Links.Attributes scanned as %T", attrs)
				}
				for k := range objs {
					b, err := json.Marshal(objs[k].NestedMap())
					if err != nil {
						t.Fatal(err)
					}
					got[i].linkAttrs = append(got[i].linkAttrs, string(b))
				}
			}
			if err := links.Err(); err != nil {
				t.Fatalf("links: %v", err)
			}
			_ = links.Close()
			for i := range sent {
				equalSpan(t, i, got[i], sent[i])
			}
			var sum uint64
			if err := db.QueryRowContext(ctx, "SELECT sum(SpanAttributes.http.status_code::Int64) FROM spans").Scan(&sum); err != nil {
				t.Fatalf("sum over JSON path: %v", err)
			}
			var want uint64
			for i := range sent {
				want += uint64(200 + i%5)
			}
			if sum != want {
				t.Fatalf("sum over JSON path: %d, want %d", sum, want)
			}
			checkWire(t, c.method, w.all())
		})
	}
}

// ---------------------------------------------------------------------------------------------
// (e) errors carry ClickHouse's code; (f) a wrong password is code 516
// ---------------------------------------------------------------------------------------------

// errorCode extracts the ClickHouse error code the way a caller of this driver version can:
// a typed *clickhouse.Exception when the driver builds one, otherwise the `Code: N.` text
// of the server's exception, which clickhouse-go v2.43 returns inside a plain error for HTTP
// responses with a non-200 status (it never builds *Exception over HTTP; see README.md).
func errorCode(err error) (code int32, typed bool) {
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return ex.Code, true
	}
	msg := err.Error()
	if i := strings.Index(msg, "Code: "); i >= 0 {
		var n int32
		if _, e := fmt.Sscanf(msg[i:], "Code: %d.", &n); e == nil {
			return n, false
		}
	}
	return 0, false
}

func TestUnknownTableError(t *testing.T) {
	s := stackEnv(t)
	for _, c := range compressions {
		t.Run(c.name, func(t *testing.T) {
			w := &wire{}
			conn := open(t, options(s, c.method, "", w))
			ctx := ctxT(t)
			_, err := conn.Query(ctx, "SELECT * FROM no_such_table_gocompat")
			if err == nil {
				t.Fatal("query of an unknown table succeeded")
			}
			code, typed := errorCode(err)
			if code != 60 {
				t.Fatalf("want code 60 (UNKNOWN_TABLE), got %d from: %v", code, err)
			}
			if !strings.Contains(err.Error(), "[HTTP 404]") || !strings.Contains(err.Error(), "UNKNOWN_TABLE") {
				t.Fatalf("error does not look like ClickHouse's: %v", err)
			}
			var ex *clickhouse.Exception
			if typed && errors.As(err, &ex) && ex.Name != "DB::Exception" {
				t.Fatalf("typed exception with name %q: %v", ex.Name, err)
			}
			if !typed && !strings.Contains(err.Error(), "Code: 60. DB::Exception: ") {
				t.Fatalf("error text is not ClickHouse's: %v", err)
			}
			t.Logf("typed *clickhouse.Exception: %v; error: %v", typed, err)
			// The server sent the code in the header newer drivers build *clickhouse.Exception from.
			var headerCodes []string
			for _, e := range w.all() {
				if e.status != 200 {
					headerCodes = append(headerCodes, fmt.Sprintf("%d:%s", e.status, e.exceptionCode))
				}
			}
			if len(headerCodes) != 1 || headerCodes[0] != "404:60" {
				t.Fatalf("failed responses (status:X-ClickHouse-Exception-Code) = %v, want [404:60]", headerCodes)
			}
			// The same for an INSERT batch into an unknown table (the driver's DESCRIBE fails).
			_, err = conn.PrepareBatch(ctx, "INSERT INTO no_such_table_gocompat")
			if code, _ := errorCode(err); code != 60 {
				t.Fatalf("PrepareBatch into unknown table: want code 60, got %d from %v", code, err)
			}
			// database/sql surfaces it the same way.
			db := openDB(t, options(s, c.method, "", nil))
			_, err = db.QueryContext(ctx, "SELECT * FROM no_such_table_gocompat")
			if code, _ := errorCode(err); code != 60 {
				t.Fatalf("database/sql: want code 60, got %d from %v", code, err)
			}
		})
	}
}

func TestErrorInsideInsertBody(t *testing.T) {
	// A Native body the engine refuses (a block whose column type disagrees with the table)
	// surfaces with the engine's code and leaves the table unchanged.
	s := stackEnv(t)
	db := freshDatabase(t, s)
	conn := open(t, options(s, clickhouse.CompressionLZ4, db, nil))
	ctx := ctxT(t)
	if err := conn.Exec(ctx, "CREATE TABLE t (a UInt64, s String) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	// The column list and types are supplied by the caller, so the driver encodes `a` as a
	// String column; the engine refuses a String column for a UInt64 one.
	bctx := clickhouse.Context(ctx, clickhouse.WithColumnNamesAndTypes([]clickhouse.ColumnNameAndType{
		{Name: "a", Type: "String"}, {Name: "s", Type: "String"},
	}))
	batch, err := conn.PrepareBatch(bctx, "INSERT INTO t (a, s)")
	if err != nil {
		t.Fatalf("PrepareBatch: %v", err)
	}
	if err := batch.Append("not a number", "x"); err != nil {
		t.Fatal(err)
	}
	err = batch.Send()
	if err == nil {
		t.Fatal("insert of a String column into UInt64 succeeded")
	}
	if code, _ := errorCode(err); code == 0 {
		t.Fatalf("no ClickHouse code in: %v", err)
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("table changed by a failed insert: count=%d err=%v", n, err)
	}
}

func TestWrongPassword(t *testing.T) {
	s := stackEnv(t)
	s.password = "not-the-password"
	for _, c := range []clickhouse.CompressionMethod{clickhouse.CompressionNone, clickhouse.CompressionLZ4} {
		conn := open(t, options(s, c, "", nil)) // Open connects lazily
		err := conn.Ping(ctxT(t))
		if err == nil {
			t.Fatal("Ping with a wrong password succeeded")
		}
		if code, _ := errorCode(err); code != 516 {
			t.Fatalf("want code 516 (AUTHENTICATION_FAILED), got %d from: %v", code, err)
		}
		db := openDB(t, options(s, c, "", nil))
		err = db.PingContext(ctxT(t))
		if code, _ := errorCode(err); code != 516 {
			t.Fatalf("database/sql: want code 516, got %d from: %v", code, err)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// (g) per-query settings and server-side query parameters
// ---------------------------------------------------------------------------------------------

func TestSettingsAndParameters(t *testing.T) {
	s := stackEnv(t)
	for _, c := range compressions {
		t.Run(c.name, func(t *testing.T) {
			conn := open(t, options(s, c.method, "", nil))
			ctx := ctxT(t)

			sctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{
				"max_block_size":                       4321,
				"max_result_rows":                      1717171,
				"date_time_output_format":              "iso",
				"output_format_decimal_trailing_zeros": 1,
			}))
			var mbs uint64
			var met, dtf string
			if err := conn.QueryRow(sctx, "SELECT toUInt64(getSetting('max_block_size')), toString(getSetting('max_result_rows')), "+
				"getSetting('date_time_output_format')").Scan(&mbs, &met, &dtf); err != nil {
				t.Fatalf("settings: %v", err)
			}
			if mbs != 4321 || met != "1717171" || dtf != "iso" {
				t.Fatalf("settings not applied: max_block_size=%d max_result_rows=%s date_time_output_format=%s", mbs, met, dtf)
			}
			// Settings of one query do not leak into the next one.
			if err := conn.QueryRow(ctx, "SELECT toUInt64(getSetting('max_block_size'))").Scan(&mbs); err != nil || mbs == 4321 {
				t.Fatalf("setting leaked into the next query: %d %v", mbs, err)
			}
			// An unknown setting is refused with its code.
			bad := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"no_such_setting_x": 1}))
			err := conn.QueryRow(bad, "SELECT 1").Scan(&mbs)
			if code, _ := errorCode(err); code != 115 {
				t.Fatalf("unknown setting: want code 115, got %d from %v", code, err)
			}

			pctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{
				// Values are in the escaped text format, as ClickHouse's HTTP interface parses
				// them: a tab and a backslash in the value are sent as \t and \\.
				"s":   `it's a "test"\twith\\escapes`,
				"n":   "42",
				"arr": "['a','b\\'c']",
				"ts":  "2023-11-14 22:13:20.123456789",
				"m":   "{'k1':'v1','k2':'v2'}",
			}))
			var (
				str string
				n   uint64
				arr []string
				ts  time.Time
				m   map[string]string
			)
			if err := conn.QueryRow(pctx, "SELECT {s:String}, {n:UInt64} + 1, {arr:Array(String)}, "+
				"{ts:DateTime64(9, 'UTC')}, {m:Map(String, String)}").Scan(&str, &n, &arr, &ts, &m); err != nil {
				t.Fatalf("parameters: %v", err)
			}
			if str != "it's a \"test\"\twith\\escapes" || n != 43 || !reflect.DeepEqual(arr, []string{"a", "b'c"}) ||
				ts.UnixNano() != 1_700_000_000_123_456_789 || !reflect.DeepEqual(m, map[string]string{"k1": "v1", "k2": "v2"}) {
				t.Fatalf("parameters: %q %d %q %v %v", str, n, arr, ts, m)
			}
			// A parameter used as an identifier.
			var name string
			ictx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"tbl": "one"}))
			if err := conn.QueryRow(ictx, "SELECT name FROM system.tables WHERE database = 'system' AND name = {tbl:String}").Scan(&name); err != nil || name != "one" {
				t.Fatalf("parameter in WHERE: %q %v", name, err)
			}
			if err := conn.QueryRow(ictx, "SELECT count() FROM system.{tbl:Identifier}").Scan(&n); err != nil || n != 1 {
				t.Fatalf("Identifier parameter: %d %v", n, err)
			}
			// database/sql with driver-side positional binding.
			db := openDB(t, options(s, c.method, "", nil))
			if err := db.QueryRowContext(ctx, "SELECT ? + 1, ?", 41, "it's").Scan(&n, &str); err != nil || n != 42 || str != "it's" {
				t.Fatalf("positional binding: %d %q %v", n, str, err)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// (h) insert_deduplication_token makes a repeated identical insert a no-op
// ---------------------------------------------------------------------------------------------

func TestInsertDeduplicationToken(t *testing.T) {
	s := stackEnv(t)
	for _, c := range []struct {
		name   string
		method clickhouse.CompressionMethod
	}{{"none", clickhouse.CompressionNone}, {"lz4", clickhouse.CompressionLZ4}} {
		t.Run(c.name, func(t *testing.T) {
			db := freshDatabase(t, s)
			conn := open(t, options(s, c.method, db, nil))
			ctx := ctxT(t)
			if err := conn.Exec(ctx, spansDDL+" SETTINGS non_replicated_deduplication_window = 100"); err != nil {
				t.Fatalf("CREATE TABLE: %v", err)
			}
			sent := spans(500)
			insert := func(token string, rows []span) {
				t.Helper()
				ictx := ctx
				if token != "" {
					ictx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": token}))
				}
				batch, err := conn.PrepareBatch(ictx, spansInsert)
				if err != nil {
					t.Fatalf("PrepareBatch: %v", err)
				}
				for _, r := range rows {
					if err := batch.Append(r.args()...); err != nil {
						t.Fatalf("Append: %v", err)
					}
				}
				if err := batch.Send(); err != nil {
					t.Fatalf("Send: %v", err)
				}
			}
			count := func() uint64 {
				t.Helper()
				var n uint64
				if err := conn.QueryRow(ctx, "SELECT count() FROM spans").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			insert("topic-0-100-599", sent)
			if n := count(); n != 500 {
				t.Fatalf("after first insert: %d rows", n)
			}
			insert("topic-0-100-599", sent) // a retry of the same batch
			if n := count(); n != 500 {
				t.Fatalf("a retried insert with the same token was not deduplicated: %d rows", n)
			}
			insert("topic-0-600-1099", sent[:250]) // a different token is a different insert
			if n := count(); n != 750 {
				t.Fatalf("after an insert with another token: %d rows, want 750", n)
			}
			// The token is per query: without it the same setting does not stick to the connection.
			var tok string
			if err := conn.QueryRow(ctx, "SELECT getSetting('insert_deduplication_token')").Scan(&tok); err != nil || tok != "" {
				t.Fatalf("insert_deduplication_token leaked into a later query: %q %v", tok, err)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------------
// Concurrency: the exporter inserts from several goroutines over one pool.
// ---------------------------------------------------------------------------------------------

func TestConcurrentBatches(t *testing.T) {
	s := stackEnv(t)
	db := freshDatabase(t, s)
	opt := options(s, clickhouse.CompressionLZ4, db, nil)
	opt.MaxOpenConns = 8
	conn := open(t, opt)
	ctx := ctxT(t)
	if err := conn.Exec(ctx, spansDDL); err != nil {
		t.Fatal(err)
	}
	const workers, per = 8, 400
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for wkr := 0; wkr < workers; wkr++ {
		wg.Add(1)
		go func(wkr int) {
			defer wg.Done()
			batch, err := conn.PrepareBatch(ctx, spansInsert)
			if err != nil {
				errs <- err
				return
			}
			for _, r := range spans(per) {
				r.traceID = fmt.Sprintf("w%d-%s", wkr, r.traceID)
				if err := batch.Append(r.args()...); err != nil {
					errs <- err
					return
				}
			}
			errs <- batch.Send()
		}(wkr)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent batch: %v", err)
		}
	}
	var n, traces uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(TraceId) FROM spans").Scan(&n, &traces); err != nil {
		t.Fatal(err)
	}
	if n != workers*per || traces != workers*per {
		t.Fatalf("rows %d, distinct trace ids %d, want %d", n, traces, workers*per)
	}
}

// ---------------------------------------------------------------------------------------------
// The OpenTelemetry Collector's ClickHouse exporter (v0.149) flow, step by step: a DSN with
// async_insert=true and compress=lz4, CREATE DATABASE/TABLE IF NOT EXISTS with quoted names,
// DESC TABLE for schema detection, then batches whose JSON columns are appended as strings.
// ---------------------------------------------------------------------------------------------

const exporterLikeDDL = `CREATE TABLE IF NOT EXISTS %q.%q (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes JSON CODEC(ZSTD(1)),
    SpanAttributes JSON CODEC(ZSTD(1)),
    SpanAttributesKeys Array(LowCardinality(String)) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    Events Nested (Timestamp DateTime64(9), Name LowCardinality(String), Attributes JSON) CODEC(ZSTD(1)),
    INDEX idx_span_attr_keys SpanAttributesKeys TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
TTL toDateTime(Timestamp) + toIntervalDay(3650)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1`

const exporterLikeInsert = `INSERT INTO %q.%q (
    Timestamp, TraceId, SpanName, ServiceName, ResourceAttributes, SpanAttributes, SpanAttributesKeys,
    Duration, Events.Timestamp, Events.Name, Events.Attributes
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func TestExporterLikeFlow(t *testing.T) {
	s := stackEnv(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	database, table := "otel_"+hex.EncodeToString(b), "otel_traces"
	dsn := (&url.URL{
		Scheme: "http", Host: s.addr, Path: "/default", User: url.UserPassword(s.user, s.password),
		RawQuery: url.Values{
			"async_insert": {"true"}, "compress": {"lz4"}, "client_info_product": {"otelcol/gocompat"},
			"dial_timeout": {"10s"},
		}.Encode(),
	}).String()
	opt, err := clickhouse.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("ParseDSN: %v", err)
	}
	if opt.Protocol != clickhouse.HTTP || opt.Compression == nil || opt.Compression.Method != clickhouse.CompressionLZ4 {
		t.Fatalf("DSN parsed to protocol %v, compression %+v", opt.Protocol, opt.Compression)
	}
	conn := open(t, opt)
	ctx := ctxT(t)
	t.Cleanup(func() { _ = conn.Exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %q", database)) })
	for i := 0; i < 2; i++ { // the exporter may start twice: IF NOT EXISTS must hold
		if err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %q", database)); err != nil {
			t.Fatalf("CREATE DATABASE: %v", err)
		}
		if err := conn.Exec(ctx, fmt.Sprintf(exporterLikeDDL, database, table)); err != nil {
			t.Fatalf("CREATE TABLE: %v", err)
		}
	}

	rows, err := conn.Query(ctx, fmt.Sprintf("DESC TABLE %q.%q", database, table))
	if err != nil {
		t.Fatalf("DESC TABLE: %v", err)
	}
	var columns []string
	for rows.Next() {
		var name, skip string
		if err := rows.Scan(&name, &skip, &skip, &skip, &skip, &skip, &skip); err != nil {
			t.Fatalf("scan DESC: %v", err)
		}
		columns = append(columns, name)
	}
	_ = rows.Close()
	if !reflect.DeepEqual(columns, []string{"Timestamp", "TraceId", "SpanName", "ServiceName", "ResourceAttributes",
		"SpanAttributes", "SpanAttributesKeys", "Duration", "Events.Timestamp", "Events.Name", "Events.Attributes"}) {
		t.Fatalf("DESC TABLE columns: %v", columns)
	}

	const batches, per = 3, 700
	base := time.Unix(1_700_000_000, 0).UTC()
	for k := 0; k < batches; k++ {
		batch, err := conn.PrepareBatch(ctx, fmt.Sprintf(exporterLikeInsert, database, table))
		if err != nil {
			t.Fatalf("PrepareBatch: %v", err)
		}
		for i := 0; i < per; i++ {
			n := k*per + i
			if err := batch.Append(
				base.Add(time.Duration(n)*time.Millisecond), fmt.Sprintf("%032x", n), "span", "svc",
				`{"service":{"name":"svc"},"host":{"name":"h1"}}`,
				fmt.Sprintf(`{"http":{"status_code":%d},"n":%d}`, 200+n%3, n),
				[]string{"http.status_code", "n"},
				uint64(n),
				[]time.Time{base}, []string{"ev"}, []string{fmt.Sprintf(`{"e":%d}`, n)},
			); err != nil {
				t.Fatalf("Append: %v", err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	var count, sumN, sumEv uint64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(), sum(SpanAttributes.n::UInt64), "+
		"sum(arraySum(arrayMap(x -> x.e::UInt64, Events.Attributes))) FROM %q.%q", database, table)).
		Scan(&count, &sumN, &sumEv); err != nil {
		t.Fatalf("SELECT: %v", err)
	}
	want := uint64(batches*per*(batches*per-1)) / 2
	if count != batches*per || sumN != want || sumEv != want {
		t.Fatalf("count %d sum(n) %d sum(Events.e) %d; want %d, %d, %d", count, sumN, sumEv, batches*per, want, want)
	}
	var asyncInsert string
	if err := conn.QueryRow(ctx, "SELECT toString(getSetting('async_insert'))").Scan(&asyncInsert); err != nil || asyncInsert != "true" {
		t.Fatalf("async_insert from the DSN did not reach the server: %q %v", asyncInsert, err)
	}
}
