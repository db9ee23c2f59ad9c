package main

import (
	"regexp"
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const baseTime = int64(1_700_000_000_000_000_000)

type fspan struct {
	Name   string
	Kind   ptrace.SpanKind
	Status ptrace.StatusCode
	DurNs  int64
	Attrs  []attr
}

type fresource struct {
	Attrs []attr
	Spans []fspan
}

func filterResources() []fresource {
	return []fresource{
		{Attrs: []attr{{"service.name", str("checkout")}}, Spans: []fspan{
			{"GET /healthz", ptrace.SpanKindServer, ptrace.StatusCodeUnset, 1_000_000, []attr{{"http.route", str("/healthz")}}},
			{"GET /readyz", ptrace.SpanKindServer, ptrace.StatusCodeUnset, 2_000_000, []attr{{"url.path", str("/readyz")}}},
			{"GET /api/cart", ptrace.SpanKindServer, ptrace.StatusCodeError, 50_000_000, []attr{{"http.route", str("/api/cart")}}},
			{"SELECT cart", ptrace.SpanKindClient, ptrace.StatusCodeUnset, 500_000, []attr{{"db.system", str("postgresql")}}},
			{"internal work", ptrace.SpanKindInternal, ptrace.StatusCodeOk, 10_000_000, nil},
			{"GET /healthz/deep", ptrace.SpanKindServer, ptrace.StatusCodeUnset, 3_000_000, []attr{{"url.path", str("/healthz/deep")}}},
			{"GET /status", ptrace.SpanKindServer, ptrace.StatusCodeUnset, 1_000_000, []attr{{"url.path", i64(200)}}},
			{"publish", ptrace.SpanKindProducer, ptrace.StatusCodeUnset, 999_999, []attr{{"user_agent.original", str("kube-probe/1.29")}}},
			{"unspecified", ptrace.SpanKindUnspecified, ptrace.StatusCodeUnset, 5_000_000, []attr{{"http.route", str("/READYZ")}}},
		}},
		{Attrs: []attr{{"service.name", str("synthetic-probe")}}, Spans: []fspan{
			{"GET /", ptrace.SpanKindServer, ptrace.StatusCodeUnset, 4_000_000, []attr{{"http.route", str("/")}}},
			{"check", ptrace.SpanKindInternal, ptrace.StatusCodeError, 7_000_000, nil},
		}},
		{Attrs: []attr{{"host.name", str("h1")}}, Spans: []fspan{
			{"orphan", ptrace.SpanKindClient, ptrace.StatusCodeUnset, 0, []attr{{"http.route", str("/healthz")}}},
		}},
	}
}

func buildFilterInput(resources []fresource) ptrace.Traces {
	td := ptrace.NewTraces()
	n := 0
	for _, r := range resources {
		rs := td.ResourceSpans().AppendEmpty()
		putAttrs(rs.Resource().Attributes(), r.Attrs)
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("vectors")
		for _, fs := range r.Spans {
			s := ss.Spans().AppendEmpty()
			s.SetTraceID(pcommon.TraceID(mustTraceID("4bf92f3577b34da6a3ce929d0e0e4736")))
			s.SetSpanID(spanIDFor(n))
			n++
			s.SetName(fs.Name)
			s.SetKind(fs.Kind)
			s.Status().SetCode(fs.Status)
			s.SetStartTimestamp(pcommon.Timestamp(baseTime))
			s.SetEndTimestamp(pcommon.Timestamp(baseTime + fs.DurNs))
			putAttrs(s.Attributes(), fs.Attrs)
		}
	}
	return td
}

func spanLabel(rs ptrace.ResourceSpans, s ptrace.Span) string {
	svc := "-"
	if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
		svc = v.AsString()
	}
	return svc + " | " + s.Name()
}

// yq single-quotes a string for YAML.
func yq(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func legacySpan(conds ...string) string {
	y := "traces:\n  span:\n"
	for _, c := range conds {
		y += "    - " + yq(c) + "\n"
	}
	return y
}

func legacyResource(conds ...string) string {
	y := "traces:\n  resource:\n"
	for _, c := range conds {
		y += "    - " + yq(c) + "\n"
	}
	return y
}

func traceConds(conds ...string) string {
	y := "trace_conditions:\n"
	for _, c := range conds {
		y += "  - " + yq(c) + "\n"
	}
	return y
}

func filterVectors() *orderedMap {
	out := newOrderedMap()
	out.set("component", "filter (processor/filterprocessor); the default error_mode is ignore (feature gate processor.filter.defaultErrorModeIgnore, beta, on)")
	resources := filterResources()
	var input []any
	for _, r := range resources {
		var spans []any
		for _, s := range r.Spans {
			spans = append(spans, newOrderedMap().set("name", s.Name).set("kind", s.Kind.String()).
				set("status_code", s.Status.String()).set("duration_ns", s.DurNs).set("attributes", encAttrs(s.Attrs)))
		}
		input = append(input, newOrderedMap().set("resource_attributes", encAttrs(r.Attrs)).set("spans", spans))
	}
	out.set("input", input)
	out.set("input_note", "one batch; each resource has one scope; every span starts at 1700000000000000000 ns; "+
		"labels below are \"<service.name or -> | <span name>\"")

	type fcase struct{ name, yaml string }
	cases := []fcase{
		{"service: legacy traces.span, resource path", legacySpan(`resource.attributes["service.name"] == "synthetic-probe"`)},
		{"service: legacy traces.resource", legacyResource(`attributes["service.name"] == "synthetic-probe"`)},
		{"service: trace_conditions (resource context)", traceConds(`resource.attributes["service.name"] == "synthetic-probe"`)},
		{"name: legacy", legacySpan(`name == "GET /healthz"`)},
		{"name: trace_conditions", traceConds(`span.name == "GET /healthz"`)},
		{"name: legacy with span. prefix", legacySpan(`span.name == "GET /healthz"`)},
		{"name: trace_conditions without prefix", traceConds(`name == "GET /healthz"`)},
		{"kind: legacy enum", legacySpan(`kind == SPAN_KIND_INTERNAL`)},
		{"kind: trace_conditions enum", traceConds(`span.kind == SPAN_KIND_INTERNAL`)},
		{"kind: trace_conditions kind.string", traceConds(`span.kind.string == "Client"`)},
		{"kind: trace_conditions kind == 3", traceConds(`span.kind == 3`)},
		{"status: legacy", legacySpan(`status.code == STATUS_CODE_ERROR`)},
		{"status: trace_conditions", traceConds(`span.status.code == STATUS_CODE_ERROR`)},
		{"status: trace_conditions not error", traceConds(`span.status.code != STATUS_CODE_ERROR`)},
		{"duration: legacy unix nanos < 1ms", legacySpan(`end_time_unix_nano - start_time_unix_nano < 1000000`)},
		{"duration: trace_conditions Duration < 1ms", traceConds(`span.end_time - span.start_time < Duration("1ms")`)},
		{"duration: trace_conditions unix nanos <= 1ms", traceConds(`span.end_time_unix_nano - span.start_time_unix_nano <= 1000000`)},
		{"attribute equal: legacy", legacySpan(`attributes["http.route"] == "/healthz"`)},
		{"attribute equal: trace_conditions", traceConds(`span.attributes["http.route"] == "/healthz"`)},
		{"attribute absent: trace_conditions == nil", traceConds(`span.attributes["http.route"] == nil`)},
		{"regex: legacy IsMatch anchored", legacySpan(`IsMatch(attributes["url.path"], "^/(healthz|readyz)$")`)},
		{"regex: trace_conditions IsMatch anchored", traceConds(`IsMatch(span.attributes["url.path"], "^/(healthz|readyz)$")`)},
		{"regex: trace_conditions IsMatch unanchored", traceConds(`IsMatch(span.attributes["url.path"], "healthz")`)},
		{"regex: IsMatch on an int attribute", traceConds(`IsMatch(span.attributes["url.path"], "^200$")`)},
		{"regex: IsMatch case-insensitive flag", traceConds(`IsMatch(span.attributes["http.route"], "(?i)^/readyz$")`)},
		{"regex: IsMatch on the span name", traceConds(`IsMatch(span.name, "^GET /(healthz|readyz)")`)},
		{"int attribute compared to a string", traceConds(`span.attributes["url.path"] == "200"`)},
		{"several conditions are ORed", traceConds(`span.name == "publish"`, `resource.attributes["host.name"] == "h1"`)},
		{"and inside one condition", traceConds(`span.kind == SPAN_KIND_SERVER and span.status.code == STATUS_CODE_ERROR`)},
		{"runtime error: default error_mode (ignore)", traceConds(`Substring(span.name, 0, 12) == "GET /healthz"`, `span.name == "check"`)},
		{"runtime error: error_mode ignore", "error_mode: ignore\n" + traceConds(`Substring(span.name, 0, 12) == "GET /healthz"`, `span.name == "check"`)},
		{"runtime error: error_mode silent", "error_mode: silent\n" + traceConds(`Substring(span.name, 0, 12) == "GET /healthz"`, `span.name == "check"`)},
		{"runtime error: error_mode propagate", "error_mode: propagate\n" + traceConds(`Substring(span.name, 0, 12) == "GET /healthz"`, `span.name == "check"`)},
		{"runtime error: legacy, error_mode propagate", "error_mode: propagate\n" + legacySpan(`Substring(name, 0, 12) == "GET /healthz"`, `name == "check"`)},
		{"mixing legacy and trace_conditions", legacySpan(`name == "check"`) + traceConds(`span.name == "publish"`)},
		{"a bare true needs an explicit context", traceConds(`true`)},
		{"advanced syntax: explicit context, per-group error_mode", "trace_conditions:\n  - context: span\n    error_mode: propagate\n    conditions:\n      - 'IsRootSpan()'\n  - conditions:\n      - 'span.name == \"check\"'\n"},
	}
	var runs []any
	for _, c := range cases {
		rec := newOrderedMap().set("name", c.name).set("config_yaml", c.yaml)
		res, cerr, err := runOnce(buildFilterInput(resources), stage{"filter", c.yaml})
		if err != nil {
			rec.set("config_error", stableContextList(err.Error()))
			runs = append(runs, rec)
			continue
		}
		kept := []string{}
		forEachSpan(res, func(rs ptrace.ResourceSpans, _ ptrace.ScopeSpans, s ptrace.Span) {
			kept = append(kept, spanLabel(rs, s))
		})
		dropped := []string{}
		for _, r := range resources {
			svc := "-"
			for _, a := range r.Attrs {
				if a.K == "service.name" {
					svc = a.V["str"].(string)
				}
			}
			for _, s := range r.Spans {
				l := svc + " | " + s.Name
				found := false
				for _, k := range kept {
					if k == l {
						found = true
					}
				}
				if !found {
					dropped = append(dropped, l)
				}
			}
		}
		if cerr != nil {
			rec.set("consume_error", cerr.Error())
			rec.set("note", "ConsumeTraces returned an error: nothing reached the next consumer")
		}
		rec.set("kept", kept)
		rec.set("dropped", dropped)
		runs = append(runs, rec)
	}
	out.set("runs", runs)
	if len(runs) == 0 {
		fail("no filter runs")
	}
	return out
}

var contextListRE = regexp.MustCompile(`\[("[a-z]+"(?: "[a-z]+")*)\]`)

// stableContextList sorts the lists of context names in an error message: the processor
// prints them in Go map order, which changes from run to run.
func stableContextList(msg string) string {
	return contextListRE.ReplaceAllStringFunc(msg, func(m string) string {
		items := strings.Split(m[1:len(m)-1], " ")
		sort.Strings(items)
		return "[" + strings.Join(items, " ") + "] (sorted by the generator)"
	})
}
