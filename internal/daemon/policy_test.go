package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestBinaryTurnToolCallWaitsForApproval: an agent turn's tool calls under the built-in
// ask-writes policy wait in the approval queue with the turn door, the session and the rule;
// the operator denies one write, whose approval_denied the model reads, and approves the
// other, which reaches the adapter (the last call: the scripted adapter's empty fs.write
// result fails the connection); the turn then ends.
func TestBinaryTurnToolCallWaitsForApproval(t *testing.T) {
	adapter := startScriptedAdapter(t)
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	c := d.Dial()
	operator := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()
	p := withTools(modelOpen(cwd), descriptor(adapter.socket, host, "agent", 1, newHandle(t), "fs.read", "fs.write"))
	p["policy"] = map[string]any{"name": "ask-writes"}
	if r := call(t, c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{
			{ID: "call_no", Name: "fs_write", Arguments: `{"path":"no.txt","content":"x","create":true}`},
			{ID: "call_yes", Name: "fs_write", Arguments: `{"path":"yes.txt","content":"x","create":true}`},
		}},
		modeltest.Reply{Text: "done"},
	)
	woke := make(chan *client.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := c.Call(ctx, client.Command{Operation: "wake", SessionID: "agent", Generation: gen(1), IdempotencyKey: "k1",
			Payload: map[string]any{"prompt": "write both", "waitForTerminal": true}})
		if err != nil {
			r = &client.Response{}
		}
		woke <- r
	}()
	// The operator, attached to the session, decides each write as its approval event
	// arrives: yes.txt is approved, no.txt denied.
	if r := call(t, operator, client.Command{Operation: "attach", SessionID: "agent", Generation: gen(1), Payload: map[string]any{}}); !r.OK {
		t.Fatalf("attach: %v", r.Err())
	}
	var r *client.Response
	for decided := 0; decided < 2; {
		select {
		case r = <-woke:
			t.Fatalf("the turn ended after %d decisions: %+v", decided, r)
		case raw := <-operator.Events():
			var ev struct {
				Event string `json:"event"`
				Data  struct {
					Type  string `json:"type"`
					Entry struct {
						ID    string `json:"id"`
						Path  string `json:"path"`
						Actor struct {
							Door    string `json:"door"`
							Session string `json:"session"`
						} `json:"actor"`
						Reason string `json:"reason"`
					} `json:"entry"`
				} `json:"data"`
			}
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Event != "approval" || ev.Data.Type != "asked" {
				continue
			}
			a := ev.Data.Entry
			if a.Actor.Door != "turn" || a.Actor.Session != "agent" || a.Reason != "session policy rule 1 (every write waits for the operator): ask fs.write" {
				t.Fatalf("the waiting tool call: %+v", a)
			}
			approve := a.Path == "yes.txt"
			if r := call(t, c, client.Command{Operation: "decideApproval", Payload: map[string]any{"approvalId": a.ID, "approve": approve}}); !r.OK {
				t.Fatalf("decide %s: %v", a.Path, r.Err())
			}
			decided++
		case <-time.After(30 * time.Second):
			t.Fatal("no approval event")
		}
	}
	var res turnResult
	if r = <-woke; r.Decode(&res) != nil || res.Result.Text != "done" {
		t.Fatalf("wake: %+v %+v", r, res)
	}
	outputs := map[string]string{}
	for _, m := range llm.Requests()[1].Request.Messages {
		if m.Role == model.RoleTool {
			outputs[m.ToolCallID] = m.Content
		}
	}
	if !strings.Contains(outputs["call_no"], "approval_denied") || strings.Contains(outputs["call_yes"], "approval") {
		t.Fatalf("tool outputs the model read: %q", outputs)
	}
	adapter.mu.Lock()
	defer adapter.mu.Unlock()
	var paths []any
	for _, f := range adapter.frames {
		if f["kind"] == "invoke" {
			paths = append(paths, f["payload"].(map[string]any)["path"])
		}
	}
	if len(paths) != 1 || paths[0] != "yes.txt" {
		t.Fatalf("the adapter was invoked for %v, want only yes.txt", paths)
	}
}
