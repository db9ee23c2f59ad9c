package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/attributesprocessor"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/filterprocessor"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/probabilisticsamplerprocessor"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/redactionprocessor"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
)

var factories = map[string]processor.Factory{}

func init() {
	for _, f := range []processor.Factory{
		filterprocessor.NewFactory(),
		redactionprocessor.NewFactory(),
		attributesprocessor.NewFactory(),
		probabilisticsamplerprocessor.NewFactory(),
	} {
		factories[f.Type().String()] = f
	}
}

// stage is one processor of a pipeline: its component id ("filter/r1") and its YAML
// configuration, decoded the way the collector decodes it.
type stage struct {
	ID   string
	YAML string
}

// parseYAML turns YAML text into a confmap.Conf exactly as the collector's YAML provider does.
func parseYAML(text string) (*confmap.Conf, error) {
	ret, err := confmap.NewRetrievedFromYAML([]byte(text))
	if err != nil {
		return nil, err
	}
	return ret.AsConf()
}

// buildConfig decodes a component's section into its factory's default config, as
// otelcol's configunmarshaler does (sub.Unmarshal(&cfg)), then validates it.
func buildConfig(id string, sub *confmap.Conf) (processor.Factory, component.Config, error) {
	typ, _, _ := strings.Cut(id, "/")
	f, ok := factories[typ]
	if !ok {
		return nil, nil, fmt.Errorf("no factory for %q", typ)
	}
	cfg := f.CreateDefaultConfig()
	if err := sub.Unmarshal(&cfg); err != nil {
		return nil, nil, fmt.Errorf("unmarshal %s: %w", id, err)
	}
	if err := confmap.Validate(cfg); err != nil {
		return nil, nil, fmt.Errorf("invalid %s: %w", id, err)
	}
	return f, cfg, nil
}

// chain is a started pipeline of processors ending in a sink.
type chain struct {
	first consumer.Traces
	comps []component.Component
	sink  *consumertest.TracesSink
}

func newChainFromConfs(ids []string, confs []*confmap.Conf) (*chain, error) {
	ctx := context.Background()
	c := &chain{sink: new(consumertest.TracesSink)}
	var next consumer.Traces = c.sink
	for i := len(ids) - 1; i >= 0; i-- {
		f, cfg, err := buildConfig(ids[i], confs[i])
		if err != nil {
			return nil, err
		}
		set := processortest.NewNopSettings(f.Type())
		p, err := f.CreateTraces(ctx, set, cfg, next)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", ids[i], err)
		}
		if err := p.Start(ctx, componenttest.NewNopHost()); err != nil {
			return nil, fmt.Errorf("start %s: %w", ids[i], err)
		}
		c.comps = append(c.comps, p)
		next = p
	}
	c.first = next
	return c, nil
}

// newChain builds a pipeline from stages whose YAML is the component's own section.
func newChain(stages ...stage) (*chain, error) {
	ids := make([]string, len(stages))
	confs := make([]*confmap.Conf, len(stages))
	for i, s := range stages {
		conf, err := parseYAML(s.YAML)
		if err != nil {
			return nil, fmt.Errorf("yaml of %s: %w", s.ID, err)
		}
		ids[i], confs[i] = s.ID, conf
	}
	return newChainFromConfs(ids, confs)
}

// run feeds td through the chain and returns what reached the sink (all batches merged)
// and the error ConsumeTraces returned, if any.
func (c *chain) run(td ptrace.Traces) (ptrace.Traces, error) {
	c.sink.Reset()
	err := c.first.ConsumeTraces(context.Background(), td)
	out := ptrace.NewTraces()
	for _, t := range c.sink.AllTraces() {
		t.ResourceSpans().MoveAndAppendTo(out.ResourceSpans())
	}
	return out, err
}

func (c *chain) shutdown() {
	for _, p := range c.comps {
		_ = p.Shutdown(context.Background())
	}
}

// runOnce builds a chain, runs one input through it and shuts it down.
func runOnce(td ptrace.Traces, stages ...stage) (ptrace.Traces, error, error) {
	c, err := newChain(stages...)
	if err != nil {
		return ptrace.Traces{}, nil, err
	}
	defer c.shutdown()
	out, cerr := c.run(td)
	return out, cerr, nil
}

// ---- encoding of pdata for the JSON ----

func encValue(v pcommon.Value) map[string]any {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return map[string]any{"str": v.Str()}
	case pcommon.ValueTypeInt:
		return map[string]any{"int": strconv.FormatInt(v.Int(), 10)}
	case pcommon.ValueTypeDouble:
		d := v.Double()
		s := strconv.FormatFloat(d, 'g', -1, 64)
		if d == 0 && math.Signbit(d) {
			s = "-0"
		}
		return map[string]any{"double": s}
	case pcommon.ValueTypeBool:
		return map[string]any{"bool": v.Bool()}
	case pcommon.ValueTypeBytes:
		return map[string]any{"bytes_hex": hex.EncodeToString(v.Bytes().AsRaw())}
	case pcommon.ValueTypeSlice:
		items := []any{}
		for i := 0; i < v.Slice().Len(); i++ {
			items = append(items, encValue(v.Slice().At(i)))
		}
		return map[string]any{"slice": items}
	case pcommon.ValueTypeMap:
		return map[string]any{"map": encMap(v.Map())}
	default:
		return map[string]any{"empty": nil}
	}
}

func encMap(m pcommon.Map) [][]any {
	out := [][]any{}
	for k, v := range m.All() {
		out = append(out, []any{k, encValue(v)})
	}
	return out
}

// putValue sets attrs[k] from the JSON-like encoding used in the vectors.
func putValue(m pcommon.Map, k string, enc map[string]any) {
	v := m.PutEmpty(k)
	setValue(v, enc)
}

func setValue(v pcommon.Value, enc map[string]any) {
	for typ, raw := range enc {
		switch typ {
		case "str":
			v.SetStr(raw.(string))
		case "int":
			i, err := strconv.ParseInt(raw.(string), 10, 64)
			if err != nil {
				panic(err)
			}
			v.SetInt(i)
		case "double":
			s := raw.(string)
			var d float64
			switch s {
			case "-0":
				d = math.Copysign(0, -1)
			default:
				var err error
				d, err = strconv.ParseFloat(s, 64)
				if err != nil {
					panic(err)
				}
			}
			v.SetDouble(d)
		case "bool":
			v.SetBool(raw.(bool))
		case "bytes_hex":
			b, _ := hex.DecodeString(raw.(string))
			v.SetEmptyBytes().FromRaw(b)
		case "slice":
			s := v.SetEmptySlice()
			for _, it := range raw.([]any) {
				setValue(s.AppendEmpty(), it.(map[string]any))
			}
		case "map":
			mm := v.SetEmptyMap()
			for _, kv := range raw.([][]any) {
				setValue(mm.PutEmpty(kv[0].(string)), kv[1].(map[string]any))
			}
		case "empty":
		default:
			panic("unknown value type " + typ)
		}
	}
}

func str(s string) map[string]any   { return map[string]any{"str": s} }
func i64(i int64) map[string]any    { return map[string]any{"int": strconv.FormatInt(i, 10)} }
func f64(s string) map[string]any   { return map[string]any{"double": s} }
func boolean(b bool) map[string]any { return map[string]any{"bool": b} }

// attr is one key/value of an input attribute map, in order.
type attr struct {
	K string
	V map[string]any
}

func putAttrs(m pcommon.Map, attrs []attr) {
	for _, a := range attrs {
		putValue(m, a.K, a.V)
	}
}

func encAttrs(attrs []attr) [][]any {
	out := [][]any{}
	for _, a := range attrs {
		out = append(out, []any{a.K, a.V})
	}
	return out
}

func spanKindName(k ptrace.SpanKind) string { return k.String() }

// spanRecord is what the vectors show of one output span.
func spanRecord(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans, s ptrace.Span, withAttrs bool) map[string]any {
	rec := map[string]any{
		"name":    s.Name(),
		"span_id": s.SpanID().String(),
	}
	if sn, ok := rs.Resource().Attributes().Get("service.name"); ok {
		rec["service"] = sn.AsString()
	}
	if ts := s.TraceState().AsRaw(); ts != "" {
		rec["tracestate"] = ts
	}
	if withAttrs {
		rec["attributes"] = encMap(s.Attributes())
		if s.Events().Len() > 0 {
			evs := []any{}
			for i := 0; i < s.Events().Len(); i++ {
				evs = append(evs, map[string]any{"name": s.Events().At(i).Name(), "attributes": encMap(s.Events().At(i).Attributes())})
			}
			rec["events"] = evs
		}
		if s.Links().Len() > 0 {
			ls := []any{}
			for i := 0; i < s.Links().Len(); i++ {
				ls = append(ls, map[string]any{"attributes": encMap(s.Links().At(i).Attributes())})
			}
			rec["links"] = ls
		}
		rec["resource_attributes"] = encMap(rs.Resource().Attributes())
		if ss.Scope().Attributes().Len() > 0 {
			rec["scope_attributes"] = encMap(ss.Scope().Attributes())
		}
	}
	return rec
}

func forEachSpan(td ptrace.Traces, f func(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans, s ptrace.Span)) {
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j)
			for k := 0; k < ss.Spans().Len(); k++ {
				f(rs, ss, ss.Spans().At(k))
			}
		}
	}
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}
