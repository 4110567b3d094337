package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestBinaryAbortTool holds an invokeTool in the adapter and aborts it with abortTool: the
// call is answered adapter_request_aborted (retryable) at once, the adapter gets a targeted
// abort frame, and an abortTool of a call that is not in flight answers aborted:false.
func TestBinaryAbortTool(t *testing.T) {
	adapter := startScriptedAdapter(t)
	block := make(chan struct{})
	adapter.block = block
	released := false
	release := func() {
		if !released {
			released = true
			close(block)
		}
	}
	t.Cleanup(release)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("hello"), 0o600)
	p := openPayload(cwd)
	p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter",
		"descriptor": descriptor(adapter.socket, hostID(t, c), "tooled", 1, newHandle(t), "fs.stat")}
	if r := call(t, c, client.Command{Operation: "open", SessionID: "tooled", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatal(r.Err())
	}

	answered := make(chan *client.Response, 1)
	go func() {
		r, err := c.Call(context.Background(), client.Command{Operation: "invokeTool", SessionID: "tooled", Generation: gen(1),
			RequestID: "held-1", Payload: map[string]any{"toolCallId": "call-1", "operation": "fs.stat", "arguments": map[string]any{"path": "a.txt"}}})
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}()
	waitFor(t, func() bool { return slices.Contains(adapter.kinds(), "invoke") })

	abort := func(id string) bool {
		var res struct {
			Aborted bool `json:"aborted"`
		}
		if err := call(t, c, client.Command{Operation: "abortTool", Payload: map[string]any{"requestId": id}}).Decode(&res); err != nil {
			t.Fatalf("abortTool %s: %v", id, err)
		}
		return res.Aborted
	}
	if abort("not-in-flight") {
		t.Fatal("abortTool of an unknown request answered aborted:true")
	}
	if !abort("held-1") {
		t.Fatal("abortTool of the held call answered aborted:false")
	}
	r := <-answered
	if r == nil || code(r) != "adapter_request_aborted" || !r.Error.Retryable {
		t.Fatalf("aborted invokeTool answered %+v", r)
	}
	if abort("held-1") {
		t.Fatal("a second abortTool of the same call answered aborted:true")
	}
	release()
	waitFor(t, func() bool { return slices.Contains(adapter.kinds(), "abort") })

	if got := code(call(t, c, client.Command{Operation: "abortTool", Payload: map[string]any{"requestId": ""}})); got != "invalid_field" {
		t.Fatalf("abortTool without a requestId: %s", got)
	}
}
