package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// TestBinaryTurnToolCallsPassThePolicy: an agent turn's tool calls pass the gate with the
// session's policy, here the built-in read-only named at open. The model's fs_write is
// refused policy_denied (the model reads the code), never reaches the adapter, and its
// fs_read in the same turn runs.
func TestBinaryTurnToolCallsPassThePolicy(t *testing.T) {
	adapter := startScriptedAdapter(t)
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	c := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("hello"), 0o600)
	p := withTools(modelOpen(cwd), descriptor(adapter.socket, host, "agent", 1, newHandle(t), "fs.read", "fs.write"))
	p["policy"] = map[string]any{"name": "read-only"}
	if r := call(t, c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}

	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{
			{ID: "call_w", Name: "fs_write", Arguments: `{"path":"b.txt","content":"x","create":true}`},
			{ID: "call_r", Name: "fs_read", Arguments: `{"path":"a.txt"}`},
		}},
		modeltest.Reply{Text: "done"},
	)
	var res turnResult
	if err := wake(t, c, "agent", 1, "k1", "write b.txt, then read a.txt", true).Decode(&res); err != nil {
		t.Fatalf("wake: %v", err)
	}
	if res.Result.Text != "done" || res.Result.ToolCalls != 2 {
		t.Fatalf("result %+v", res)
	}
	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model saw %d requests", len(reqs))
	}
	outputs := map[string]string{}
	for _, m := range reqs[1].Request.Messages {
		if m.Role == model.RoleTool {
			outputs[m.ToolCallID] = m.Content
		}
	}
	if !strings.Contains(outputs["call_w"], "policy_denied") || !strings.Contains(outputs["call_r"], "hello") {
		t.Fatalf("tool outputs the model read: %q", outputs)
	}
	adapter.mu.Lock()
	defer adapter.mu.Unlock()
	var ops []any
	for _, f := range adapter.frames {
		if f["kind"] == "invoke" {
			ops = append(ops, f["operation"])
		}
	}
	if len(ops) != 1 || ops[0] != "fs.read" {
		t.Fatalf("the adapter was invoked for %v, want only fs.read", ops)
	}
}
