package mcp_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
	"github.com/airlockhq/airlock/internal/protocol"
)

// lampAvailable waits until the daemon lists desk_lamp as available, so that a bridge started
// next lists its tools.
func (e *env) lampAvailable(t *testing.T) {
	t.Helper()
	waitFor(t, "desk_lamp available", func() bool {
		r := call(t, e.c, client.Command{Operation: protocol.OpListCapabilities})
		var list struct {
			Capabilities []capclient.CapabilitySummary `json:"capabilities"`
		}
		if !r.OK || json.Unmarshal(r.Data, &list) != nil {
			return false
		}
		return slices.ContainsFunc(list.Capabilities, func(c capclient.CapabilitySummary) bool {
			return c.CapabilityID == "desk_lamp" && c.Available
		})
	})
}

// tsEvent is a line revisions.mjs prints.
type tsEvent struct {
	Event   string          `json:"event"`
	Version string          `json:"version"`
	Era     string          `json:"era"`
	Names   []string        `json:"names"`
	Result  json.RawMessage `json:"result"`
	Message string          `json:"message"`
}

// TestTypeScriptClientRevisions drives airlock mcp with the TypeScript SDK's 2.x client
// (@modelcontextprotocol/client, testdata/clients/revisions.mjs), pinned to 2026-07-28 and on
// "auto", over stdio (the airlock binary, spawned by the client) and over Streamable HTTP (with
// the bearer token): each negotiates 2026-07-28 by server/discover, lists the tools, calls
// fs_stat, and, subscribed to list changes (subscriptions/listen), is told when the lamp's
// adapter is removed and lists the tools without it.
func TestTypeScriptClientRevisions(t *testing.T) {
	npmBin(t, "node")
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	airlock := daemontest.Binary(t, "airlock")
	for _, transport := range []string{"stdio", "http"} {
		for _, pin := range []string{revStateless, ""} {
			name := transport + "/pin-" + pin
			if pin == "" {
				name = transport + "/auto"
			}
			t.Run(name, func(t *testing.T) {
				e.registerLamp(t)
				e.lampAvailable(t)
				opts := map[string]any{"transport": transport, "tool": "fs_stat", "toolArgs": map[string]any{"path": "."}, "watch": true}
				if pin != "" {
					opts["pin"] = pin
				}
				if transport == "stdio" {
					opts["command"] = airlock
					opts["args"] = []string{"--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1", "--caps", "desk_lamp", "--poll", "100ms"}
				} else {
					url, token, _ := httpServer(t, e, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}, PollInterval: 100 * time.Millisecond})
					opts["url"], opts["token"] = url, token
				}
				ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
				defer cancel()
				cmd, lines, stderr := nodeScript(t, ctx, "revisions.mjs", opts)
				next := func(want string) tsEvent {
					t.Helper()
					line, ok := <-lines
					var ev tsEvent
					if ok && json.Unmarshal([]byte(line), &ev) != nil {
						ev = tsEvent{Event: "garbage", Message: line}
					}
					if !ok || ev.Event != want {
						cancel()
						for range lines {
						}
						cmd.Wait()
						t.Fatalf("revisions.mjs: got %+v (open %v), want %q\nstderr:\n%s", ev, ok, want, stderr.String())
					}
					return ev
				}
				if ev := next("connected"); ev.Version != revStateless || ev.Era != "modern" {
					t.Errorf("negotiated %q (%s), want %s", ev.Version, ev.Era, revStateless)
				}
				if ev := next("tools"); len(ev.Names) != 4 || !slices.Contains(ev.Names, "fs_stat") || !slices.Contains(ev.Names, "desk_lamp_observe") {
					t.Errorf("tools/list: %v", ev.Names)
				}
				var res struct {
					IsError           bool           `json:"isError"`
					StructuredContent map[string]any `json:"structuredContent"`
				}
				if ev := next("call"); json.Unmarshal(ev.Result, &res) != nil || res.IsError || res.StructuredContent["type"] != "directory" {
					t.Errorf("tools/call fs_stat: %s", ev.Result)
				}
				next("watching")
				if r := call(t, e.c, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
					t.Fatal(r.Err())
				}
				if ev := next("changed"); !slices.Equal(ev.Names, []string{"fs_stat"}) {
					t.Errorf("tools after the list changed: %v", ev.Names)
				}
				for line := range lines { // read to the end before Wait closes stdout
					t.Errorf("revisions.mjs printed after the change: %s", line)
				}
				if err := cmd.Wait(); err != nil {
					t.Errorf("revisions.mjs: %v\nstderr:\n%s", err, stderr.String())
				}
			})
		}
	}
}
