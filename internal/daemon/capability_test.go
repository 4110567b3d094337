package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/protocol"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// holdingAdapter is a capability adapter that never answers observe: it appends a byte to the
// file named by its argument instead, so that a test knows the request reached it. It answers
// list, describe and invoke.
const holdingAdapter = `#!/bin/sh
desc='{"capabilityId":"held_probe","title":"Held probe","version":"1","observe":true,"actions":[{"name":"poke","title":"Poke","input":{"type":"object","properties":{}}}]}'
while IFS= read -r line; do
	id=$(printf '%s' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
	case "$line" in
	*'"method":"list"'*) printf '{"protocolVersion":1,"id":"%s","result":[%s]}\n' "$id" "$desc" ;;
	*'"method":"describe"'*) printf '{"protocolVersion":1,"id":"%s","result":%s}\n' "$id" "$desc" ;;
	*'"method":"observe"'*) printf x >>"$1" ;;
	*) printf '{"protocolVersion":1,"id":"%s","result":{"poked":true}}\n' "$id" ;;
	esac
done
`

// TestCapabilityCallsWaitWithoutTheConnection: an observeCapability the adapter has not
// answered holds neither the connection's reader nor its writer, and neither does an
// invokeCapability queued behind it for the same child; statuses sent after them on the same
// connection are answered first. Both calls still pending at shutdown are answered, as
// unavailable, before the connection closes.
func TestCapabilityCallsWaitWithoutTheConnection(t *testing.T) {
	root := daemontest.ShortDir(t)
	script, marker := filepath.Join(root, "held.sh"), filepath.Join(root, "observed")
	if err := os.WriteFile(script, []byte(holdingAdapter), 0o700); err != nil {
		t.Fatal(err)
	}

	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
		Adapters: capclient.Options{CallTimeout: capclient.MaxCallTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Shutdown(context.Background())
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !d.sessions.Ready(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("daemon not ready")
		}
	}
	nc, err := net.Dial("unix", d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(nc)
	send := func(line string) {
		if _, err := nc.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	reg, _ := json.Marshal(map[string]any{"name": "held", "command": script, "args": []string{marker}})
	send(`{"protocolVersion":"2.0","requestId":"reg","operation":"registerAdapter","payload":` + string(reg) + `}`)
	if r := next(); r["ok"] != true {
		t.Fatalf("registerAdapter = %v", r)
	}
	send(`{"protocolVersion":"2.0","requestId":"poke","operation":"invokeCapability","payload":{"capabilityId":"held_probe","action":"poke","args":{}}}`)
	if r := next(); r["ok"] != true {
		t.Fatalf("invokeCapability = %v", r)
	}

	send(`{"protocolVersion":"2.0","requestId":"held","operation":"observeCapability","payload":{"capabilityId":"held_probe"}}`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if fi, err := os.Stat(marker); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the observe did not reach the adapter")
		}
	}
	send(`{"protocolVersion":"2.0","requestId":"probe","operation":"status","payload":{}}`)
	if r := next(); r["requestId"] != "probe" || r["ok"] != true {
		t.Fatalf("answer = %v, want the status", r)
	}
	send(`{"protocolVersion":"2.0","requestId":"queued","operation":"invokeCapability","payload":{"capabilityId":"held_probe","action":"poke","args":{}}}`)
	send(`{"protocolVersion":"2.0","requestId":"probe2","operation":"status","payload":{}}`)
	if r := next(); r["requestId"] != "probe2" || r["ok"] != true {
		t.Fatalf("answer = %v, want the second status", r)
	}

	shut := make(chan error, 1)
	go func() { shut <- d.Shutdown(context.Background()) }()
	got := map[string]bool{}
	for range 2 {
		r := next()
		id, _ := r["requestId"].(string)
		e, _ := r["error"].(map[string]any)
		if e == nil || e["code"] != capadapter.CodeUnavailable || e["retryable"] != true {
			t.Fatalf("pending call answered %v at shutdown, want unavailable", r)
		}
		got[id] = true
	}
	if !got["held"] || !got["queued"] {
		t.Fatalf("answered at shutdown: %v", got)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := br.ReadBytes('\n'); err == nil {
		t.Fatal("the connection stayed open after shutdown")
	}
}

// With the test hook set, capability calls take the goroutine path, and the hook sees them.
func TestCapabilityCallsWithHook(t *testing.T) {
	root := daemontest.ShortDir(t)
	seen := make(chan string, 8)
	d, err := Start(Config{SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
		dispatchHook: func(cmd *protocol.Command) { seen <- cmd.Operation }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	nc, err := net.Dial("unix", d.cfg.SocketPath)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write([]byte(`{"protocolVersion":"2.0","requestId":"o","operation":"observeCapability","payload":{"capabilityId":"no_such"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(nc).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Error *struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(line, &r); err != nil || r.Error == nil || r.Error.Code != capadapter.CodeUnknownCapability {
		t.Fatalf("observe of an unknown capability = %s", line)
	}
	if op := <-seen; op != protocol.OpObserveCapability {
		t.Fatalf("hook saw %s", op)
	}
}
