package mcp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/hint"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestNamedActionRunsOnce is QA's report with the real go-lamp adapter: a capability action
// called with _meta["io.airlock/idempotencyKey"] ran again when the same call came again after
// its outcome (the lamp, set another way in between, went back to the call's level), and the
// same key with other arguments simply ran. A named call's outcome is now remembered for
// KeyTTL after it, as airlock-fs remembers a named write's: the same call is answered from it
// without running, the same key with other arguments is idempotency_conflict, a call without
// a key runs each time, and once the outcome has expired the key names a new call.
func TestNamedActionRunsOnce(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})
	var mu sync.Mutex
	now := time.Now()
	mcp.SetKeyClock(cn.b, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	named := func(key string, level int) *sdk.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := cn.cs.CallTool(ctx, &sdk.CallToolParams{Name: "desk_lamp_set_brightness",
			Arguments: map[string]any{"level": level}, Meta: sdk.Meta{mcp.MetaIdempotencyKey: key}})
		if err != nil {
			t.Fatalf("set_brightness %d with key %s: %v", level, key, err)
		}
		return r
	}
	// The operator sets the lamp another way: through the owner socket, not the bridge.
	operator := func(level int) {
		t.Helper()
		r := call(t, e.c, client.Command{Operation: "invokeCapability", Payload: map[string]any{
			"capabilityId": "desk_lamp", "action": "set_brightness", "args": map[string]any{"level": level}}})
		if !r.OK {
			t.Fatalf("the operator's set_brightness: %v", r.Err())
		}
	}
	brightness := func() float64 {
		t.Helper()
		return structured(t, cn.call(t, "desk_lamp_observe", nil))["brightness"].(float64)
	}

	first := named("cap1", 10)
	if first.IsError || brightness() != 10 {
		t.Fatalf("the first named call: %q, lamp at %v", text(first), brightness())
	}
	operator(70)
	again := named("cap1", 10)
	if again.IsError || text(again) != text(first) {
		t.Fatalf("the retry's outcome %q differs from the first %q", text(again), text(first))
	}
	if b := brightness(); b != 70 {
		t.Fatalf("the retry ran the action again: the lamp is at %v, the operator left it at 70", b)
	}

	conflict := named("cap1", 20)
	if c := errorCode(t, conflict); c != "idempotency_conflict" {
		t.Fatalf("the same key with other arguments: %q, want idempotency_conflict", text(conflict))
	}
	if we := airlockError(t, conflict); we.Retryable || we.Hint != hint.For("idempotency_conflict") || !strings.HasSuffix(text(conflict), "\n"+we.Hint) {
		t.Fatalf("the conflict's error %+v, text %q", we, text(conflict))
	}
	if b := brightness(); b != 70 {
		t.Fatalf("the conflicting call ran: the lamp is at %v", b)
	}

	// Without a key, the same call after its outcome is a new call each time.
	cn.call(t, "desk_lamp_set_brightness", map[string]any{"level": 30})
	operator(70)
	if r := cn.call(t, "desk_lamp_set_brightness", map[string]any{"level": 30}); r.IsError || brightness() != 30 {
		t.Fatalf("an unnamed repeat did not run: %q, lamp at %v", text(r), brightness())
	}

	// The outcome is remembered for KeyTTL after it, and no longer.
	operator(70)
	advance(mcp.KeyTTL - time.Second)
	if r := named("cap1", 10); r.IsError || text(r) != text(first) || brightness() != 70 {
		t.Fatalf("within KeyTTL: %q, lamp at %v", text(r), brightness())
	}
	advance(time.Second)
	if r := named("cap1", 20); r.IsError || brightness() != 20 {
		t.Fatalf("after KeyTTL the key still held the first call: %q, lamp at %v", text(r), brightness())
	}
	// That is a new call under the same key, remembered in turn.
	operator(70)
	if r := named("cap1", 20); r.IsError || brightness() != 70 {
		t.Fatalf("the new call's retry: %q, lamp at %v", text(r), brightness())
	}
}
