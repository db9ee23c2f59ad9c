package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// recipeResources: the filter vectors' spans plus credentials, card numbers and user ids,
// and a service "orders" of 60 spans with pseudo-random trace ids, every sixth an error.
func recipeResources() []fresource {
	rs := filterResources()
	for i := range rs[0].Spans {
		s := &rs[0].Spans[i]
		switch s.Name {
		case "GET /api/cart":
			s.Attrs = append(s.Attrs,
				attr{"enduser.id", str("alice")},
				attr{"http.request.header.authorization", map[string]any{"slice": []any{str("Bearer abc.def")}}},
				attr{"payment.card", str("4111111111111111")},
				attr{"note", str("card 5500000000000004 ok")})
		case "SELECT cart":
			s.Attrs = append(s.Attrs,
				attr{"db.statement", str("SELECT * FROM cart WHERE user = 'alice'")},
				attr{"enduser.id", i64(42)})
		}
	}
	orders := fresource{Attrs: []attr{{"service.name", str("orders")}, {"enduser.id", str("resource-level-user")}}}
	for i := 0; i < 60; i++ {
		st := ptrace.StatusCodeUnset
		if i%6 == 0 {
			st = ptrace.StatusCodeError
		}
		orders.Spans = append(orders.Spans, fspan{fmt.Sprintf("order %d", i), ptrace.SpanKindServer, st, int64(1_000_000 + i),
			[]attr{{"enduser.id", str(fmt.Sprintf("user-%04d", i))}}})
	}
	return append(rs, orders)
}

// recipeInput builds the batch; the orders spans get trace ids from splitmix64 seeded
// 0x6f7264657273 ("orders"), the others the W3C example id.
func recipeInput() ptrace.Traces {
	td := buildFilterInput(recipeResources())
	r := &splitmix{s: 0x6f7264657273}
	orders := td.ResourceSpans().At(td.ResourceSpans().Len() - 1).ScopeSpans().At(0).Spans()
	for i := 0; i < orders.Len(); i++ {
		var id [16]byte
		binary.BigEndian.PutUint64(id[:8], r.next())
		binary.BigEndian.PutUint64(id[8:], r.next())
		orders.At(i).SetTraceID(pcommon.TraceID(id))
		if i == 0 {
			e := orders.At(i).Events().AppendEmpty()
			e.SetName("checkout")
			e.Attributes().PutStr("enduser.id", "event-level-user")
		}
	}
	return td
}

type recipe struct {
	File      string
	Text      string
	Pipelines map[string][]string
	Conf      *confmap.Conf
}

func loadRecipe(path string) (*recipe, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	conf, err := parseYAML(string(b))
	if err != nil {
		return nil, err
	}
	var raw struct {
		Pipelines map[string]struct {
			Processors []string `mapstructure:"processors"`
		} `mapstructure:"pipelines"`
	}
	if err := conf.Unmarshal(&raw, confmap.WithIgnoreUnused()); err != nil {
		return nil, err
	}
	r := &recipe{File: filepath.Base(path), Text: string(b), Pipelines: map[string][]string{}, Conf: conf}
	for name, p := range raw.Pipelines {
		r.Pipelines[name] = p.Processors
	}
	return r, nil
}

func (r *recipe) run(td ptrace.Traces) (ptrace.Traces, error) {
	procs, err := r.Conf.Sub("processors")
	if err != nil {
		return ptrace.Traces{}, err
	}
	out := ptrace.NewTraces()
	for _, name := range sortedKeys(r.Pipelines) {
		ids := r.Pipelines[name]
		confs := make([]*confmap.Conf, len(ids))
		for i, id := range ids {
			if confs[i], err = procs.Sub(id); err != nil {
				return ptrace.Traces{}, err
			}
		}
		c, err := newChainFromConfs(ids, confs)
		if err != nil {
			return ptrace.Traces{}, fmt.Errorf("pipeline %s: %w", name, err)
		}
		// A receiver in several pipelines hands each its own copy.
		in := ptrace.NewTraces()
		td.CopyTo(in)
		res, cerr := c.run(in)
		c.shutdown()
		if cerr != nil {
			return ptrace.Traces{}, fmt.Errorf("pipeline %s: %w", name, cerr)
		}
		res.ResourceSpans().MoveAndAppendTo(out.ResourceSpans())
	}
	return out, nil
}

// validateWithCollector writes the recipe into a whole collector configuration (the kafka
// receiver and clickhouse exporter of the build, never started) and runs `<bin> validate`.
func (r *recipe) validateWithCollector(bin string) error {
	procs := r.Conf.ToStringMap()["processors"].(map[string]any)
	procs["batch"] = map[string]any{}
	pipelines := map[string]any{}
	for name, ids := range r.Pipelines {
		pipelines[name] = map[string]any{
			"receivers":  []string{"kafka"},
			"processors": append(append([]string{}, ids...), "batch"),
			"exporters":  []string{"clickhouse"},
		}
	}
	cfg := map[string]any{
		"receivers":  map[string]any{"kafka": map[string]any{"brokers": []string{"127.0.0.1:9"}, "traces": map[string]any{"topics": []string{"otlp_spans"}}}},
		"processors": procs,
		"exporters":  map[string]any{"clickhouse": map[string]any{"endpoint": "http://127.0.0.1:9", "create_schema": false}},
		"service":    map[string]any{"pipelines": pipelines},
	}
	b, _ := json.Marshal(cfg) // JSON is YAML
	f, err := os.CreateTemp("", "recipe-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		return err
	}
	f.Close()
	outB, err := exec.Command(bin, "validate", "--config", "file:"+f.Name()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, outB)
	}
	return nil
}

func recipeVectors(dir, otelcol string) *orderedMap {
	out := newOrderedMap()
	out.set("about", "each recipe file of e2e/otelcol/vectors/recipes run on one input batch; a recipe with several "+
		"pipelines gets a copy of the input per pipeline (as a receiver shared by pipelines does) and its output is the "+
		"pipelines' outputs concatenated in pipeline-name order. In a collector, append the batch processor to each "+
		"pipeline's processors.")
	validated := "not checked (run with -otelcol BIN)"
	if otelcol != "" {
		validated = "every recipe passed `" + filepath.Base(otelcol) + " validate` in a whole configuration (kafka receiver → recipe processors, batch → clickhouse exporter)"
	}
	out.set("collector_validate", validated)

	var input []any
	for _, r := range recipeResources() {
		var spans []any
		for _, s := range r.Spans {
			spans = append(spans, newOrderedMap().set("name", s.Name).set("kind", s.Kind.String()).
				set("status_code", s.Status.String()).set("duration_ns", s.DurNs).set("attributes", encAttrs(s.Attrs)))
		}
		input = append(input, newOrderedMap().set("resource_attributes", encAttrs(r.Attrs)).set("spans", spans))
	}
	out.set("input", input)
	var tids []string
	forEachSpan(recipeInput(), func(rs ptrace.ResourceSpans, _ ptrace.ScopeSpans, s ptrace.Span) {
		tids = append(tids, s.TraceID().String())
	})
	out.set("input_trace_ids_in_span_order", tids)
	out.set("input_note", "span ids are big-endian uint64(n+1) in input order; spans start at 1700000000000000000 ns; "+
		"the orders service's first span has one event with enduser.id \"event-level-user\"")

	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	sort.Strings(files)
	if len(files) == 0 {
		fail("no recipes in %s", dir)
	}
	var runs []any
	outputs := map[string]string{}
	for _, f := range files {
		r, err := loadRecipe(f)
		if err != nil {
			fail("recipe %s: %v", f, err)
		}
		if otelcol != "" {
			if err := r.validateWithCollector(otelcol); err != nil {
				fail("recipe %s does not validate with %s: %v", f, otelcol, err)
			}
		}
		res, err := r.run(recipeInput())
		if err != nil {
			fail("recipe %s: %v", f, err)
		}
		// Output grouped by resource (one entry per output ResourceSpans, in order).
		var groups []any
		n := 0
		for i := 0; i < res.ResourceSpans().Len(); i++ {
			rs := res.ResourceSpans().At(i)
			var spans []any
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j)
				for k := 0; k < ss.Spans().Len(); k++ {
					rec := spanRecord(rs, ss, ss.Spans().At(k), true)
					for _, drop := range []string{"scope_attributes", "resource_attributes", "service"} {
						delete(rec, drop)
					}
					if a := rec["attributes"].([][]any); len(a) == 0 {
						delete(rec, "attributes")
					}
					spans = append(spans, rec)
					n++
				}
			}
			groups = append(groups, newOrderedMap().set("resource_attributes", encMap(rs.Resource().Attributes())).set("spans", spans))
		}
		j, _ := json.Marshal(groups)
		outputs[r.File] = string(j)
		runs = append(runs, newOrderedMap().set("file", r.File).set("recipe_yaml", r.Text).
			set("output_span_count", n).set("output", groups))
	}
	out.set("runs", runs)
	if a, b := outputs["r1_drop_health_checks.yaml"], outputs["r1_drop_health_checks_legacy.yaml"]; a != "" && a != b {
		fail("R1 in the legacy syntax gives another output than R1")
	}
	return out
}
