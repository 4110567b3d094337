package mcp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestWithheldResultIsAToolError: through airlock mcp, a capability call whose result fails
// the runtime's screens is a tool error result_withheld, not retryable, quoting nothing of the
// result; the adapter serves on, so the board's other tools keep working, and its observe
// works again once the board is cleared. The adapter is the test's notice board, run by a
// real airlockd.
func TestWithheldResultIsAToolError(t *testing.T) {
	e := startEnv(t)
	nb := daemontest.Build(t, "./internal/daemontest/noticeboard")
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := call(t, e.c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "board", "command": nb}})
		if r.OK {
			break
		}
		if !r.Error.Retryable || time.Now().After(deadline) {
			t.Fatalf("registerAdapter: %v", r.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1),
		Payload: map[string]any{"cwd": e.root, "session": map[string]any{"mode": "memory"}}}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"notice_board"}})
	withheld := func(name string, args any) {
		t.Helper()
		r := cn.call(t, name, args)
		if !r.IsError {
			t.Fatalf("%s: %s, want an error", name, text(r))
		}
		we := airlockError(t, r)
		if we.Code != "result_withheld" || we.Retryable || strings.Contains(we.Message, "hunter2") || strings.Contains(text(r), "hunter2") ||
			!strings.HasPrefix(text(r), "airlock: result_withheld: ") || strings.Contains(text(r), "(retryable)") {
			t.Fatalf("%s: %+v %q, want result_withheld, not retryable, without the text", name, we, text(r))
		}
	}
	withheld("notice_board_post", map[string]any{"text": "wifi password: hunter2"})
	withheld("notice_board_observe", nil)
	if s := structured(t, cn.call(t, "notice_board_clear", map[string]any{})); s["cleared"] != 1.0 {
		t.Fatalf("clear: %v", s)
	}
	if s := structured(t, cn.call(t, "notice_board_observe", nil)); s["notices"] == nil || len(s["notices"].([]any)) != 0 {
		t.Fatalf("observe after the clear: %v", s)
	}
}
