package validate

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/ndjson"
)

// The screens of protocol v1, applied to decoded text (what a client sees): the harness's own
// copy, so that a FAIL can say what was found and where. The observe probe also asks the
// runtime (capclient.Client.Observe), so the harness is never laxer than the runtime.
var (
	// sensitiveName: no action, property or result key may look like an endpoint, a
	// credential or transport detail.
	sensitiveName = regexp.MustCompile(`(?i)(endpoint|url|credential|password|secret|token|adapter|protocol|hostname|authorization|cookie|method|path|accesskey)`)
	// unsafeText: a URL anywhere, or a sensitive key followed by ':' or '='.
	unsafeText = regexp.MustCompile(`(?i)(https?://|"?(endpoint|url|credential|password|secret|token|authorization|cookie|adapter|protocol|hostname|accesskey)"?\s*[:=])`)
)

// Semantic bounds of a result, beyond capadapter.MaxResultBytes.
const (
	maxResultDepth   = 4
	maxResultEntries = 32
	maxResultKeyLen  = 64
	maxQuoted        = 40
)

// screenDescriptor returns the screen violations in a descriptor: a URL or a sensitive
// key:value in any string, a sensitive action or property name.
func screenDescriptor(raw []byte) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil // not JSON: the list and describe probes say so
	}
	var out []string
	var walk func(v any, parent string)
	walk = func(v any, parent string) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				if parent == "properties" && sensitiveName.MatchString(k) {
					out = append(out, "sensitive property name "+quote(k))
				}
				if unsafeText.MatchString(k) {
					out = append(out, "unsafe key "+quote(k))
				}
				if k == "name" && parent == "actions" {
					if s, ok := x[k].(string); ok && sensitiveName.MatchString(s) {
						out = append(out, "sensitive action name "+quote(s))
					}
				}
				walk(x[k], k)
			}
		case []any:
			for _, e := range x {
				walk(e, parent)
			}
		case string:
			if unsafeText.MatchString(x) {
				out = append(out, "URL or sensitive key:value in "+quote(x))
			}
		}
	}
	walk(v, "")
	return out
}

// screenResult returns the screen violations in an observe or invoke result: a URL or a
// sensitive key:value in any key or string, a sensitive key name.
func screenResult(raw []byte, text func(string) string) []string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil // checkSemantic reports it
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(x) {
				if sensitiveName.MatchString(k) || unsafeText.MatchString(k) {
					out = append(out, "sensitive key "+text(k))
				}
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			if unsafeText.MatchString(x) {
				out = append(out, "URL or sensitive key:value in "+text(x))
			}
		}
	}
	walk(v)
	return out
}

// checkSemantic checks that a result is bounded semantic data: one strict JSON value nested
// at most 4 deep, with arrays and objects of at most 32 entries, keys of at most 64
// characters, and finite numbers. It returns the problem, or "".
func checkSemantic(raw []byte) string {
	if err := ndjson.Valid(raw); err != nil {
		return "the result is not one strict JSON value (no duplicate keys)"
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return "the result is not one JSON value"
	}
	var check func(v any, depth int) string
	check = func(v any, depth int) string {
		switch x := v.(type) {
		case map[string]any, []any:
			if depth >= maxResultDepth {
				return "the result nests deeper than 4"
			}
			var elems []any
			if m, ok := x.(map[string]any); ok {
				for _, k := range sortedKeys(m) {
					if utf8.RuneCountInString(k) > maxResultKeyLen {
						return "a result key is longer than 64 characters"
					}
					elems = append(elems, m[k])
				}
			} else {
				elems = x.([]any)
			}
			if len(elems) > maxResultEntries {
				return "a result array or object has more than 32 entries"
			}
			for _, e := range elems {
				if p := check(e, depth+1); p != "" {
					return p
				}
			}
		case json.Number:
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil || math.IsInf(f, 0) {
				return "a result number is not finite"
			}
		}
		return ""
	}
	return check(v, 0)
}

// argCase is one generated invoke args that violate an action's declared input.
type argCase struct {
	what string
	args json.RawMessage
}

// invalidArgCases generates, from an action's input, args that violate it: a required
// property missing, a property of the wrong primitive type (every other required property
// present and well typed), and an undeclared key next to well-typed required properties.
func invalidArgCases(in capadapter.Input) []argCase {
	valid := func(typ string) any {
		switch typ {
		case capadapter.TypeNumber:
			return 0
		case capadapter.TypeBoolean:
			return false
		}
		return "probe"
	}
	wrong := func(typ string) any {
		switch typ {
		case capadapter.TypeString:
			return 1
		case capadapter.TypeNumber:
			return "1"
		}
		return "true"
	}
	base := func() map[string]any {
		m := map[string]any{}
		for _, r := range in.Required {
			m[r] = valid(in.Properties[r])
		}
		return m
	}
	enc := func(m map[string]any) json.RawMessage {
		b, _ := json.Marshal(m)
		return b
	}
	var out []argCase
	if len(in.Required) > 0 {
		r := in.Required[0]
		m := base()
		delete(m, r)
		out = append(out, argCase{what: "required " + quote(r) + " missing", args: enc(m)})
	}
	names := sortedKeys(in.Properties)
	if len(in.Required) > 0 {
		names = []string{in.Required[0]} // a required property: the adapter must read it
	}
	if len(names) > 0 {
		p := names[0]
		m := base()
		m[p] = wrong(in.Properties[p])
		out = append(out, argCase{what: quote(p) + " of the wrong type", args: enc(m)})
	}
	if _, declared := in.Properties[probeProperty]; !declared {
		m := base()
		m[probeProperty] = "probe"
		out = append(out, argCase{what: "undeclared key " + quote(probeProperty), args: enc(m)})
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// maxQuotedMessage bounds an adapter's error message quoted in a report.
const maxQuotedMessage = 120

// quote quotes adapter text for a report, shortened, with control characters escaped.
func quote(s string) string { return quoteN(s, maxQuoted) }

// quoteN is quote with a bound of n code points.
func quoteN(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		s = string(r[:n]) + "…"
	}
	return strconv.Quote(s)
}
