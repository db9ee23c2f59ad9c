package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// splitmix64: the deterministic generator of the vectors' trace ids (documented in the JSON
// so another language can regenerate them; the ids are also listed in full).
type splitmix struct{ s uint64 }

func (r *splitmix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

const traceIDSeed = 0x7472616365686f75 // "tracehou"

func gridTraceIDs() [][16]byte {
	r := &splitmix{s: traceIDSeed}
	var ids [][16]byte
	for i := 0; i < 200; i++ {
		var id [16]byte
		binary.BigEndian.PutUint64(id[:8], r.next())
		binary.BigEndian.PutUint64(id[8:], r.next())
		ids = append(ids, id)
	}
	for _, h := range []string{
		"00000000000000000000000000000000", // empty trace id: no randomness
		"ffffffffffffffffffffffffffffffff",
		"00000000000000000000000000000001",
		"4bf92f3577b34da6a3ce929d0e0e4736", // the W3C Trace Context example
	} {
		ids = append(ids, mustTraceID(h))
	}
	return ids
}

func mustTraceID(h string) [16]byte {
	var id [16]byte
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 16 {
		panic("bad trace id " + h)
	}
	copy(id[:], b)
	return id
}

func spanIDFor(i int) pcommon.SpanID {
	var sid [8]byte
	binary.BigEndian.PutUint64(sid[:], uint64(i)+1)
	return pcommon.SpanID(sid)
}

type samplerCase struct {
	TraceID    [16]byte
	TraceState string
	Attrs      []attr
}

// runSamplerBatch sends one batch of spans (one per case, in order) through a sampler
// configured by yaml and returns, per case, whether it came out and the output span.
func runSamplerBatch(yaml string, cases []samplerCase) ([]bool, []ptrace.Span, error) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "sampler-vectors")
	ss := rs.ScopeSpans().AppendEmpty()
	for i, c := range cases {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(pcommon.TraceID(c.TraceID))
		s.SetSpanID(spanIDFor(i))
		s.SetName(fmt.Sprintf("s%d", i))
		s.TraceState().FromRaw(c.TraceState)
		putAttrs(s.Attributes(), c.Attrs)
	}
	out, cerr, err := runOnce(td, stage{ID: "probabilistic_sampler", YAML: yaml})
	if err != nil {
		return nil, nil, err
	}
	if cerr != nil {
		return nil, nil, fmt.Errorf("consume: %w", cerr)
	}
	byID := map[pcommon.SpanID]ptrace.Span{}
	forEachSpan(out, func(_ ptrace.ResourceSpans, _ ptrace.ScopeSpans, s ptrace.Span) { byID[s.SpanID()] = s })
	kept := make([]bool, len(cases))
	spans := make([]ptrace.Span, len(cases))
	for i := range cases {
		s, ok := byID[spanIDFor(i)]
		kept[i] = ok
		spans[i] = s
	}
	return kept, spans, nil
}

type gridRun struct {
	Name string
	YAML string
	// model: which reimplementation must agree ("hash_seed", "consistent", "" for none)
	Model     string
	Pct       float32
	Seed      uint32
	Precision int
}

func samplerVectors() *orderedMap {
	ids := gridTraceIDs()
	idHex := make([]string, len(ids))
	for i, id := range ids {
		idHex[i] = hex.EncodeToString(id[:])
	}
	out := newOrderedMap()
	out.set("component", "probabilistic_sampler (processor/probabilisticsamplerprocessor)")
	out.set("defaults", map[string]any{
		"mode":               "unset, which selects hash_seed (sampler_mode.go: defaultMode = HashSeed); the README's 'proportional ... is selected by default' sentence is wrong for this version",
		"fail_closed":        true,
		"sampling_precision": 4,
		"hash_seed":          0,
	})
	out.set("trace_ids_generator", "ids 0..199: splitmix64 seeded 0x7472616365686f75, state += 0x9e3779b97f4a7c15 per draw; "+
		"each id = big-endian draw 1 || big-endian draw 2. ids 200..203 fixed: zero, all-ff, ...01, the W3C example")
	out.set("trace_ids", idHex)
	out.set("grid_input", "one batch; span i has trace id trace_ids[i], span id = big-endian uint64(i+1), empty tracestate, no attributes")

	var runs []gridRun
	for _, pct := range []float32{1, 10, 33.3, 50} {
		for _, seed := range []uint32{0, 22} {
			runs = append(runs, gridRun{
				Name:  fmt.Sprintf("hash_seed pct=%g seed=%d", pct, seed),
				YAML:  fmt.Sprintf("mode: hash_seed\nsampling_percentage: %s\nhash_seed: %d\n", fmtPct(pct), seed),
				Model: "hash_seed", Pct: pct, Seed: seed, Precision: 4,
			})
		}
	}
	for _, seed := range []uint32{0, 22} {
		runs = append(runs, gridRun{
			Name:  fmt.Sprintf("mode unset pct=10 seed=%d (the default mode)", seed),
			YAML:  fmt.Sprintf("sampling_percentage: 10\nhash_seed: %d\n", seed),
			Model: "hash_seed", Pct: 10, Seed: seed, Precision: 4,
		})
	}
	for _, pct := range []float32{1, 10, 33.3, 50} {
		runs = append(runs, gridRun{
			Name:  fmt.Sprintf("proportional pct=%g", pct),
			YAML:  fmt.Sprintf("mode: proportional\nsampling_percentage: %s\n", fmtPct(pct)),
			Model: "consistent", Pct: pct, Precision: 4,
		})
	}
	runs = append(runs,
		gridRun{Name: "proportional pct=10 seed=22 (hash_seed is ignored by this mode)", YAML: "mode: proportional\nsampling_percentage: 10\nhash_seed: 22\n", Model: "consistent", Pct: 10, Precision: 4},
		gridRun{Name: "proportional pct=33.3 sampling_precision=14", YAML: "mode: proportional\nsampling_percentage: 33.3\nsampling_precision: 14\n", Model: "consistent", Pct: 33.3, Precision: 14},
		gridRun{Name: "proportional pct=1 sampling_precision=1", YAML: "mode: proportional\nsampling_percentage: 1\nsampling_precision: 1\n", Model: "consistent", Pct: 1, Precision: 1},
		gridRun{Name: "equalizing pct=10", YAML: "mode: equalizing\nsampling_percentage: 10\n", Model: "consistent", Pct: 10, Precision: 4},
		gridRun{Name: "equalizing pct=50", YAML: "mode: equalizing\nsampling_percentage: 50\n", Model: "consistent", Pct: 50, Precision: 4},
		gridRun{Name: "hash_seed pct=0", YAML: "mode: hash_seed\nsampling_percentage: 0\n", Model: "hash_seed", Pct: 0, Precision: 4},
		gridRun{Name: "hash_seed pct=100", YAML: "mode: hash_seed\nsampling_percentage: 100\n", Model: "hash_seed", Pct: 100, Precision: 4},
		gridRun{Name: "hash_seed pct=250 (above 100 means 100)", YAML: "mode: hash_seed\nsampling_percentage: 250\n", Model: "hash_seed", Pct: 250, Precision: 4},
		gridRun{Name: "hash_seed pct=0.001 (rounds to 0 buckets: never)", YAML: "mode: hash_seed\nsampling_percentage: 0.001\n", Model: "hash_seed", Pct: 0.001, Precision: 4},
		gridRun{Name: "hash_seed pct=99.99", YAML: "mode: hash_seed\nsampling_percentage: 99.99\n", Model: "hash_seed", Pct: 99.99, Precision: 4},
		gridRun{Name: "proportional pct=0", YAML: "mode: proportional\nsampling_percentage: 0\n", Model: "consistent", Pct: 0, Precision: 4},
		gridRun{Name: "proportional pct=100", YAML: "mode: proportional\nsampling_percentage: 100\n", Model: "consistent", Pct: 100, Precision: 4},
		gridRun{Name: "proportional pct=0.001", YAML: "mode: proportional\nsampling_percentage: 0.001\n", Model: "consistent", Pct: 0.001, Precision: 4},
	)

	cases := make([]samplerCase, len(ids))
	for i, id := range ids {
		cases[i] = samplerCase{TraceID: id}
	}
	var gridOut []any
	for _, r := range runs {
		kept, spans, err := runSamplerBatch(r.YAML, cases)
		if err != nil {
			fail("sampler %s: %v", r.Name, err)
		}
		bits := make([]byte, len(kept))
		tsOut := newOrderedMap()
		nKept := 0
		attrsChanged := false
		for i, k := range kept {
			bits[i] = '0'
			if !k {
				continue
			}
			nKept++
			bits[i] = '1'
			tsOut.set(strconv.Itoa(i), spans[i].TraceState().AsRaw())
			if spans[i].Attributes().Len() != 0 {
				attrsChanged = true
			}
		}
		for i := range kept {
			var ts string
			if kept[i] {
				ts = spans[i].TraceState().AsRaw()
			}
			checkModel(r, ids[i], kept[i], ts)
		}
		o := newOrderedMap()
		o.set("name", r.Name)
		o.set("config_yaml", r.YAML)
		o.set("kept_count", nKept)
		o.set("kept", string(bits))
		o.set("tracestate_out_of_kept", tsOut)
		o.set("attributes_added", attrsChanged)
		gridOut = append(gridOut, o)
	}
	out.set("grid", gridOut)
	out.set("tracestate_cases", tracestateCases())
	out.set("sampling_priority_cases", priorityCases())
	return out
}

func fmtPct(p float32) string { return strconv.FormatFloat(float64(p), 'g', -1, 32) }

var tsTraceIDs = []string{
	"4bf92f3577b34da6a3ce929d0e0e4736",
	"0102030405060708090a0b0c0d0e0f10",
	"ffffffffffffffffffffffffffffffff",
	"00000000000000000000000000000000",
}

func tracestateCases() *orderedMap {
	states := []string{
		"",
		"ot=rv:ffffffffffffff",
		"ot=rv:00000000000001",
		"ot=th:8",
		"ot=th:8;rv:9b8233f7e3a151",
		"ot=th:0;rv:9b8233f7e3a151",
		"vendor1=abc,ot=rv:fffffffffffff0;zz:keep,vendor2=x",
		"ot=th:c",
		"ot=th:fffffffffffff",
		"ot=rv:zz",
		"ot=th:8;rv:9b8233f7e3a151;",
		"foo=bar",
		"ot=th:1",
		"congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
	}
	modes := []struct{ name, yaml string }{
		{"hash_seed pct=10", "mode: hash_seed\nsampling_percentage: 10\n"},
		{"hash_seed pct=10 fail_closed=false", "mode: hash_seed\nsampling_percentage: 10\nfail_closed: false\n"},
		{"proportional pct=10", "mode: proportional\nsampling_percentage: 10\n"},
		{"proportional pct=10 fail_closed=false", "mode: proportional\nsampling_percentage: 10\nfail_closed: false\n"},
		{"proportional pct=50", "mode: proportional\nsampling_percentage: 50\n"},
		{"equalizing pct=10", "mode: equalizing\nsampling_percentage: 10\n"},
	}
	var cases []samplerCase
	for _, ts := range states {
		for _, id := range tsTraceIDs {
			cases = append(cases, samplerCase{TraceID: mustTraceID(id), TraceState: ts})
		}
	}
	out := newOrderedMap()
	out.set("about", "each mode runs one batch holding every (tracestate_in, trace_id) pair; "+
		"tracestate_out is the output span's tracestate (absent when dropped)")
	var runs []any
	for _, m := range modes {
		kept, spans, err := runSamplerBatch(m.yaml, cases)
		if err != nil {
			fail("tracestate %s: %v", m.name, err)
		}
		var recs []any
		for i, c := range cases {
			rec := newOrderedMap()
			rec.set("trace_id", hex.EncodeToString(c.TraceID[:]))
			rec.set("tracestate_in", c.TraceState)
			rec.set("kept", kept[i])
			if kept[i] {
				rec.set("tracestate_out", spans[i].TraceState().AsRaw())
			}
			recs = append(recs, rec)
		}
		runs = append(runs, newOrderedMap().set("name", m.name).set("config_yaml", m.yaml).set("cases", recs))
	}
	out.set("runs", runs)
	return out
}

func priorityCases() *orderedMap {
	prios := [][]attr{
		nil,
		{{"sampling.priority", i64(0)}},
		{{"sampling.priority", i64(1)}},
		{{"sampling.priority", i64(-1)}},
		{{"sampling.priority", f64("0")}},
		{{"sampling.priority", f64("0.5")}},
		{{"sampling.priority", str("1")}},
		{{"sampling.priority", str("0")}},
		{{"sampling.priority", str("abc")}},
		{{"sampling.priority", boolean(true)}},
	}
	modes := []struct{ name, yaml string }{
		{"hash_seed pct=1", "mode: hash_seed\nsampling_percentage: 1\n"},
		{"proportional pct=1", "mode: proportional\nsampling_percentage: 1\n"},
		{"hash_seed pct=0", "mode: hash_seed\nsampling_percentage: 0\n"},
		{"proportional pct=0", "mode: proportional\nsampling_percentage: 0\n"},
	}
	var cases []samplerCase
	for _, p := range prios {
		for _, id := range tsTraceIDs {
			cases = append(cases, samplerCase{TraceID: mustTraceID(id), Attrs: p})
		}
	}
	out := newOrderedMap()
	out.set("about", "span attribute sampling.priority (OpenTracing): 0 forces drop, > 0 forces keep, "+
		"other values defer; int, double and numeric strings are read")
	var runs []any
	for _, m := range modes {
		kept, spans, err := runSamplerBatch(m.yaml, cases)
		if err != nil {
			fail("priority %s: %v", m.name, err)
		}
		var recs []any
		for i, c := range cases {
			rec := newOrderedMap()
			rec.set("trace_id", hex.EncodeToString(c.TraceID[:]))
			rec.set("attributes_in", encAttrs(c.Attrs))
			rec.set("kept", kept[i])
			if kept[i] {
				rec.set("tracestate_out", spans[i].TraceState().AsRaw())
				rec.set("attributes_out", encMap(spans[i].Attributes()))
			}
			recs = append(recs, rec)
		}
		runs = append(runs, newOrderedMap().set("name", m.name).set("config_yaml", m.yaml).set("cases", recs))
	}
	out.set("runs", runs)
	return out
}
