package tooladapter

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Fixtures of the wire's tests. toolclient's harness_test.go starts from the same descriptor
// and handle, so that both packages' tests speak of one binding.

// testHandle is the capability handle of every test descriptor; tests scan errors and logs for it.
const testHandle = "cap_TEST-handle_0123456789abcdefghijklmnopqrstuvwxyz"

// shortRoot makes a private directory under /tmp, so that socket paths fit sun_path whatever
// TMPDIR is.
func shortRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ta-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func baseLimits() map[string]any {
	return map[string]any{
		"maxRequestBytes": 1048576, "maxResponseBytes": 1048576,
		"maxConcurrentRequests": 4, "maxQueuedRequests": 16, "requestTimeoutMs": 30000,
		"maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000,
	}
}

// descriptorMap returns a valid descriptor as a map, bound to testBinding.
func descriptorMap(sock string) map[string]any {
	return map[string]any{
		"protocolVersion": "1.0",
		"adapterId":       "owner-filesystem",
		"adapterVersion":  "1.2.0",
		"endpoint":        map[string]any{"transport": "unix", "path": sock},
		"binding": map[string]any{
			"hostInstanceId": "host-019f", "sessionId": "agent-a", "generation": 2,
			"capabilityHandle": testHandle,
		},
		"operations": []any{"fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"},
		"limits":     baseLimits(),
	}
}

var testBinding = Binding{HostInstanceID: "host-019f", SessionID: "agent-a", Generation: 2}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustDescriptor(t testing.TB, m map[string]any) *Descriptor {
	t.Helper()
	b := m["binding"].(map[string]any)
	want := Binding{HostInstanceID: b["hostInstanceId"].(string), SessionID: b["sessionId"].(string), Generation: int64(b["generation"].(int))}
	d, e := ParseDescriptor(mustJSON(t, m), want)
	if e != nil {
		t.Fatalf("ParseDescriptor: %v", e)
	}
	return d
}

// resultData returns valid data for op; the fs.stat size carries n so callers can correlate.
func resultData(op string, n int) json.RawMessage {
	digest := strings.Repeat("ab", 32)
	switch op {
	case OpList:
		return json.RawMessage(`{"entries":[{"name":"a.txt","type":"file","size":1}],"truncated":false}`)
	case OpStat:
		return json.RawMessage(fmt.Sprintf(`{"type":"file","size":%d,"modifiedAt":"2026-01-02T03:04:05Z"}`, n))
	case OpRead:
		return json.RawMessage(`{"content":"hello","bytesRead":5,"eof":true}`)
	case OpSearch:
		return json.RawMessage(`{"matches":[{"path":"src/a.go","line":1,"column":2,"text":"x"}],"truncated":false}`)
	case OpWrite:
		return json.RawMessage(`{"created":true,"bytesWritten":5,"digest":"` + digest + `"}`)
	case OpEdit:
		return json.RawMessage(`{"replacements":1,"digest":"` + digest + `"}`)
	}
	return nil
}

// wantCode fails the test unless e has code.
func wantCode(t testing.TB, e *protocol.Error, code string) {
	t.Helper()
	if e == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if e.Code != code {
		t.Fatalf("got %v (details %v), want %s", e, e.Details, code)
	}
}

// secretFree fails the test if s contains the handle or the socket path.
func secretFree(t testing.TB, what, s, sock string) {
	t.Helper()
	if strings.Contains(s, testHandle) {
		t.Errorf("%s contains the capability handle: %s", what, s)
	}
	if sock != "" && strings.Contains(s, sock) {
		t.Errorf("%s contains the socket path: %s", what, s)
	}
}

// errorTexts renders e every way a caller might.
func errorTexts(e *protocol.Error) string {
	if e == nil {
		return ""
	}
	b, _ := json.Marshal(e)
	return e.Error() + "\n" + fmt.Sprintf("%v %+v %#v", e, e, e) + "\n" + string(b)
}
