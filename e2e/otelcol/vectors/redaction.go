package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const (
	visaRE    = `4[0-9]{12}(?:[0-9]{3})?`
	emailRE   = `[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}`
	hmacKey32 = "tracehouse-differential-key-0032"                                 // 32 bytes
	hmacKey64 = "tracehouse-differential-key-0064-tracehouse-differential-key-064" // 64 bytes
)

func redactionAttrs() []attr {
	return []attr{
		{"http.route", str("/api/cart")},
		{"auth_token", str("s3cr3t")},
		{"x-token-count", i64(7)},
		{"card", str("4111111111111111")},
		{"note", str("paid with 4111111111111111 and 4012888888881881, mail bob@example.com")},
		{"amex", str("371449635398431")},
		{"visa13", str("4222222222222")},
		{"long_digits", str("41111111111111119999")},
		{"user.email", str("alice@example.org")},
		{"card_int", i64(4111111111111111)},
		{"multiline_token", str("line1\nline2")},
		{"empty_token", str("")},
		{"tags", map[string]any{"slice": []any{str("4111111111111111")}}},
		{"flag", boolean(true)},
	}
}

func redactionInput() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "redaction-vectors")
	putAttrs(rs.Resource().Attributes(), redactionAttrs())
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("vectors")
	putAttrs(ss.Scope().Attributes(), redactionAttrs())
	s := ss.Spans().AppendEmpty()
	s.SetTraceID(pcommon.TraceID(mustTraceID("4bf92f3577b34da6a3ce929d0e0e4736")))
	s.SetSpanID(spanIDFor(0))
	s.SetName("GET /pay/4111111111111111")
	putAttrs(s.Attributes(), redactionAttrs())
	e := s.Events().AppendEmpty()
	e.SetName("payment")
	putAttrs(e.Attributes(), redactionAttrs())
	l := s.Links().AppendEmpty()
	l.SetTraceID(pcommon.TraceID(mustTraceID("0102030405060708090a0b0c0d0e0f10")))
	putAttrs(l.Attributes(), redactionAttrs())
	return td
}

func baseRedactionYAML(allowAll bool) string {
	y := ""
	if allowAll {
		y += "allow_all_keys: true\n"
	}
	return y + "blocked_key_patterns:\n  - '.*token.*'\nblocked_values:\n  - '" + visaRE + "'\n  - '" + emailRE + "'\n"
}

func redactionVectors() *orderedMap {
	out := newOrderedMap()
	out.set("component", "redaction (processor/redactionprocessor)")
	out.set("input_attributes", encAttrs(redactionAttrs()))
	out.set("input_note", "one resource (service.name + the attributes), one scope, one span named "+
		"\"GET /pay/4111111111111111\" with one event and one link; the resource, scope, span, event and link "+
		"attribute maps each hold input_attributes")
	base := baseRedactionYAML(true)
	type rcase struct {
		name   string
		stages []stage
	}
	cases := []rcase{
		{"summary_silent", []stage{{"redaction", base + "summary: silent\n"}}},
		{"summary_info", []stage{{"redaction", base + "summary: info\n"}}},
		{"summary_debug", []stage{{"redaction", base + "summary: debug\n"}}},
		{"summary_unset", []stage{{"redaction", base}}},
		{"debug_redact_all_types", []stage{{"redaction", base + "summary: debug\nredact_all_types: true\n"}}},
		{"allowlist_debug", []stage{{"redaction", "allowed_keys: [http.route, card, note, user.email]\n" + baseRedactionYAML(false) + "summary: debug\n"}}},
		{"allow_all_keys_unset_empty_allowlist", []stage{{"redaction", "summary: debug\n"}}},
		{"ignored_keys_debug", []stage{{"redaction", base + "ignored_keys: [note]\nignored_key_patterns: ['^user\\.']\nsummary: debug\n"}}},
		{"allowed_values_debug", []stage{{"redaction", base + "allowed_values: ['@example\\.com']\nsummary: debug\n"}}},
		{"hash_md5", []stage{{"redaction", base + "hash_function: md5\nsummary: debug\n"}}},
		{"hash_sha1", []stage{{"redaction", base + "hash_function: sha1\nsummary: debug\n"}}},
		{"hash_sha3", []stage{{"redaction", base + "hash_function: sha3\nsummary: debug\n"}}},
		{"hash_hmac_sha256", []stage{{"redaction", base + "hash_function: hmac-sha256\nhmac_key: " + hmacKey32 + "\nsummary: debug\n"}}},
		{"hash_hmac_sha512", []stage{{"redaction", base + "hash_function: hmac-sha512\nhmac_key: " + hmacKey64 + "\nsummary: debug\n"}}},
		{"two_processors_debug", []stage{{"redaction/a", base + "summary: debug\n"}, {"redaction/b", "allow_all_keys: true\nblocked_values: ['^/api/']\nsummary: debug\n"}}},
	}
	var runs []any
	for _, c := range cases {
		rec := newOrderedMap().set("name", c.name)
		var yamls []any
		for _, s := range c.stages {
			yamls = append(yamls, map[string]any{"id": s.ID, "config_yaml": s.YAML})
		}
		rec.set("processors", yamls)
		// The processor keeps its regexes in Go maps, whose iteration order is random:
		// run each case several times and say whether the output ever differed.
		var first string
		distinct := map[string]bool{}
		var firstOut ptrace.Traces
		for rep := 0; rep < 25; rep++ {
			res, cerr, err := runOnce(redactionInput(), c.stages...)
			if err != nil || cerr != nil {
				fail("redaction %s: %v %v", c.name, err, cerr)
			}
			var recs []any
			forEachSpan(res, func(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans, s ptrace.Span) {
				recs = append(recs, spanRecord(rs, ss, s, true))
			})
			j, _ := json.Marshal(recs)
			distinct[string(j)] = true
			if rep == 0 {
				first = string(j)
				firstOut = res
			}
		}
		_ = first
		var recs []any
		forEachSpan(firstOut, func(rs ptrace.ResourceSpans, ss ptrace.ScopeSpans, s ptrace.Span) {
			rec := spanRecord(rs, ss, s, true)
			// The summary_* runs show every map; the others only the span's own attributes
			// (the processor treats the resource, scope and event maps the same way).
			if !strings.HasPrefix(c.name, "summary_") && c.name != "allowlist_debug" {
				for _, k := range []string{"resource_attributes", "scope_attributes", "events", "links"} {
					delete(rec, k)
				}
			}
			recs = append(recs, rec)
		})
		rec.set("output_spans", recs)
		rec.set("distinct_outputs_in_25_runs", len(distinct))
		runs = append(runs, rec)
	}
	out.set("runs", runs)
	out.set("config_errors", redactionConfigErrors())
	return out
}

// redactionConfigErrors records what configurations the processor refuses.
func redactionConfigErrors() []any {
	var out []any
	for _, y := range []string{
		"allow_all_keys: true\nhash_function: hmac-sha256\n",
		"allow_all_keys: true\nhash_function: hmac-sha256\nhmac_key: short\n",
		"allow_all_keys: true\nhash_function: hmac-sha512\nhmac_key: " + hmacKey32 + "\n",
		"allow_all_keys: true\nhash_function: sha256\n",
		"allow_all_keys: true\nsummary: verbose\n",
		"allow_all_keys: true\nblocked_values: ['(']\n",
	} {
		_, cerr, err := runOnce(redactionInput(), stage{"redaction", y})
		if cerr != nil {
			err = fmt.Errorf("consume: %w", cerr)
		}
		out = append(out, newOrderedMap().set("config_yaml", y).set("error", errString(err)))
	}
	return out
}
