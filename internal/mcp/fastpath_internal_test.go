package mcp

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzParseFast holds parseFast to the SDK's reading of the same line: a line the fast path
// takes is a tools/call request to the SDK too (jsonrpc.DecodeMessage), with the same id
// (and so the same drainer key, idKey), the same tool name, the same arguments (compact; {}
// when absent) and the same _meta, which names no idempotency key. Any other line must not
// panic.
func FuzzParseFast(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat","arguments":{"path":"a"}}}`,
		`{"jsonrpc":"2.0","id":"r-1","method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"fs_read","arguments":{"path":"a","maxBytes":4}}}`,
		`{"jsonrpc":"2.0","id":-7,"method":"tools/call","params":{"name":"fs_list"}}`,
		` {"params":{"arguments":{ "path" : "." },"name":"fs_list"},"method":"tools/call","id":3,"jsonrpc":"2.0"} `,
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"fs_stat","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat","arguments":null}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat","name":"fs_read"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs\u005fstat"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat","_meta":{"io.airlock/idempotencyKey":"k"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat","arguments":{"a":1,"a":2}}}`,
		`{"jsonrpc":"2.0","id":01,"method":"tools/call","params":{"name":"fs_stat"}}`,
		`{"jsonrpc":"2.0","ID":1,"method":"tools/call","params":{"name":"fs_stat"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fs_stat"}}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		c, ok := parseFast(line)
		if !ok {
			return
		}
		msg, err := jsonrpc.DecodeMessage(bytes.TrimSpace(line))
		if err != nil {
			t.Fatalf("parseFast took %s, the SDK cannot read it: %v", line, err)
		}
		req, isReq := msg.(*jsonrpc.Request)
		if !isReq || req.Method != "tools/call" || !req.IsCall() {
			t.Fatalf("parseFast took %s, the SDK reads %#v", line, msg)
		}
		var want string
		switch id := req.ID.Raw().(type) {
		case int64:
			want = "n" + strconv.FormatInt(id, 10)
		case string:
			want = "s" + id
		default:
			t.Fatalf("parseFast took %s, whose id the SDK reads as %#v", line, id)
		}
		if k, _ := idKey(c.id); c.key != want || k != want {
			t.Fatalf("parseFast took %s with key %q (%q by idKey), the SDK's id is %q", line, c.key, k, want)
		}
		var p sdk.CallToolParamsRaw
		if err := json.Unmarshal(req.Params, &p); err != nil {
			t.Fatalf("parseFast took %s, whose params the SDK cannot read: %v", line, err)
		}
		args := []byte(`{}`)
		if len(p.Arguments) > 0 {
			var buf bytes.Buffer
			if err := json.Compact(&buf, p.Arguments); err != nil {
				t.Fatal(err)
			}
			args = buf.Bytes()
		}
		if p.Name != c.name || !bytes.Equal(args, c.args) {
			t.Fatalf("parseFast took %s as %q %s, the SDK reads %q %s", line, c.name, c.args, p.Name, args)
		}
		var meta map[string]any
		if len(c.meta) > 0 && json.Unmarshal(c.meta, &meta) != nil {
			t.Fatalf("parseFast took %s, whose _meta is no object", line)
		}
		if len(meta) != len(p.Meta) {
			t.Fatalf("parseFast took %s with _meta %s, the SDK reads %v", line, c.meta, p.Meta)
		}
		if _, named := p.Meta[MetaIdempotencyKey]; named {
			t.Fatalf("parseFast took %s, which names an idempotency key", line)
		}
	})
}
