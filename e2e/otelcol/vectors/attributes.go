package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func hashInputs() []map[string]any {
	return []map[string]any{
		str("alice"),
		str("user-0001"),
		str("Zoë 👩‍💻 日本語"),
		str(""),
		str("line1\nline2"),
		str(strings.Repeat("user-12345/", 100)),
		i64(0),
		i64(1),
		i64(-1),
		i64(12345),
		i64(9223372036854775807),
		f64("0"),
		f64("-0"),
		f64("1.5"),
		f64("NaN"),
		f64("+Inf"),
		boolean(true),
		boolean(false),
		{"bytes_hex": "00ff"},
		{"slice": []any{str("a")}},
		{"map": [][]any{{"k", str("v")}}},
		{"empty": nil},
	}
}

// encodedEqual compares two encoded values through their JSON form.
func encodedEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return reflect.DeepEqual(ja, jb)
}

func attributesVectors() *orderedMap {
	out := newOrderedMap()
	out.set("component", "attributes (processor/attributesprocessor), actions from internal/coreinternal/attraction")

	// 1. hash of one key: each input value on its own span; the first span also carries the
	//    same key in its resource, event and link attributes, to show which maps it touches.
	const hashYAML = "actions:\n  - key: enduser.id\n    action: hash\n"
	inputs := hashInputs()
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "attributes-vectors")
	rs.Resource().Attributes().PutStr("enduser.id", "alice")
	ss := rs.ScopeSpans().AppendEmpty()
	for i, v := range inputs {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(pcommon.TraceID(mustTraceID("0102030405060708090a0b0c0d0e0f10")))
		s.SetSpanID(spanIDFor(i))
		s.SetName(fmt.Sprintf("v%d", i))
		putValue(s.Attributes(), "enduser.id", v)
		s.Attributes().PutStr("other", "alice")
		if i == 0 {
			e := s.Events().AppendEmpty()
			e.SetName("login")
			e.Attributes().PutStr("enduser.id", "alice")
			l := s.Links().AppendEmpty()
			l.Attributes().PutStr("enduser.id", "alice")
		}
	}
	res, cerr, err := runOnce(td, stage{ID: "attributes", YAML: hashYAML})
	if err != nil || cerr != nil {
		fail("attributes hash: %v %v", err, cerr)
	}
	var cases []any
	var where *orderedMap
	i := 0
	forEachSpan(res, func(rs ptrace.ResourceSpans, _ ptrace.ScopeSpans, s ptrace.Span) {
		v, _ := s.Attributes().Get("enduser.id")
		got := encValue(v)
		want := modelAttrHash(inputs[i])
		if !encodedEqual(got, want) {
			fail("attributes hash model disagrees on %v: processor %v, model %v", inputs[i], got, want)
		}
		modelChecks++
		other, _ := s.Attributes().Get("other")
		cases = append(cases, newOrderedMap().set("in", inputs[i]).set("out", got))
		if i == 0 {
			ev, _ := s.Events().At(0).Attributes().Get("enduser.id")
			lk, _ := s.Links().At(0).Attributes().Get("enduser.id")
			rv, _ := rs.Resource().Attributes().Get("enduser.id")
			where = newOrderedMap().
				set("span_attribute_in", "alice").set("span_attribute_out", encValue(v)).
				set("other_span_attribute_out", encValue(other)).
				set("resource_attribute_out", encValue(rv)).
				set("event_attribute_out", encValue(ev)).
				set("link_attribute_out", encValue(lk))
		}
		i++
	})
	out.set("hash_key", newOrderedMap().set("config_yaml", hashYAML).set("cases", cases).set("which_maps", where))

	// 2. hash by key pattern, and 3. delete by key and by pattern: one span each.
	type mapCase struct {
		name, yaml string
		in         []attr
	}
	for _, mc := range []mapCase{
		{"hash_pattern", "actions:\n  - pattern: ^user\\.\n    action: hash\n",
			[]attr{{"user.name", str("alice")}, {"user.id", i64(42)}, {"username", str("bob")}, {"enduser.id", str("carol")}}},
		{"hash_key_and_pattern", "actions:\n  - key: enduser.id\n    pattern: \\.email$\n    action: hash\n",
			[]attr{{"enduser.id", str("carol")}, {"user.email", str("c@example.com")}, {"email", str("x")}}},
		{"delete", "actions:\n  - key: http.request.header.authorization\n    action: delete\n  - key: db.statement\n    action: delete\n  - pattern: ^secret_\n    action: delete\n",
			[]attr{
				{"http.request.header.authorization", map[string]any{"slice": []any{str("Bearer abc")}}},
				{"http.request.header.Authorization", str("Bearer not-lowercase")},
				{"db.statement", str("SELECT * FROM users WHERE password = 'x'")},
				{"db.system", str("postgresql")},
				{"secret_key", str("k")},
				{"not_secret_key", str("k")},
			}},
		{"hash_missing_key", "actions:\n  - key: enduser.id\n    action: hash\n", []attr{{"user", str("alice")}}},
	} {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		s.SetName(mc.name)
		putAttrs(s.Attributes(), mc.in)
		res, cerr, err := runOnce(td, stage{ID: "attributes", YAML: mc.yaml})
		if err != nil || cerr != nil {
			fail("attributes %s: %v %v", mc.name, err, cerr)
		}
		outAttrs := encMap(res.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes())
		out.set(mc.name, newOrderedMap().set("config_yaml", mc.yaml).set("in", encAttrs(mc.in)).set("out", outAttrs))
	}
	return out
}
