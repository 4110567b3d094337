package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// revisionOf is namesStatelessRevision written the slow way: the body decoded whole, then
// walked by exact member names.
func revisionOf(body []byte) (string, bool) {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "", false
	}
	for _, k := range []string{"params", "_meta", "io.modelcontextprotocol/protocolVersion"} {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		v = m[k]
	}
	s, ok := v.(string)
	return s, ok
}

// FuzzStatelessRoute holds the route of a POST without MCP-Protocol-Version to the body's
// _meta revision as a full decoding reads it (except for a member name written with escapes,
// which namesStatelessRevision does not look for), and requires the body to reach the SDK as
// it came.
func FuzzStatelessRoute(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}`,
		`{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`,
		`{"PARAMS":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"params":{"_META":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":2026}}}`,
		`{"params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}}`,
		`[{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]`,
		`{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}},"params":null}`,
		`{"params":{"arguments":{"content":"\"io.modelcontextprotocol/protocolVersion\":\"2027\""}}}`,
		`{"params":null}`,
		`not json "io.modelcontextprotocol/protocolVersion"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:1/mcp", bytes.NewReader(body))
		got, err := isStateless(r)
		if err != nil {
			t.Fatal(err)
		}
		if back, _ := io.ReadAll(r.Body); !bytes.Equal(back, body) {
			t.Fatalf("the SDK would read %q, not %q", back, body)
		}
		v, ok := revisionOf(body)
		want := ok && v >= statelessRevision
		if want && !bytes.Contains(body, metaRevisionKey) {
			return // the name written with escapes: not looked for
		}
		if got != want {
			t.Fatalf("isStateless(%q) = %v, a full decoding reads %q (%v)", body, got, v, ok)
		}
	})
}

// TestRouteByHeader: the header decides when present, whatever the body says.
func TestRouteByHeader(t *testing.T) {
	modern := `{"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	for _, c := range []struct {
		method, header, body string
		want                 bool
	}{
		{http.MethodPost, "2026-07-28", `{}`, true},
		{http.MethodPost, "2027-01-01", `{}`, true},
		{http.MethodPost, "2025-11-25", modern, false},
		{http.MethodGet, "2026-07-28", ``, true},
		{http.MethodGet, "", ``, false},
		{http.MethodDelete, "2025-06-18", ``, false},
		{http.MethodPost, "", modern, true},
	} {
		r, _ := http.NewRequest(c.method, "http://127.0.0.1:1/mcp", bytes.NewReader([]byte(c.body)))
		if c.header != "" {
			r.Header.Set("Mcp-Protocol-Version", c.header)
		}
		if got, err := isStateless(r); err != nil || got != c.want {
			t.Errorf("%s with %q and %s: %v %v, want %v", c.method, c.header, c.body, got, err, c.want)
		}
	}
}
