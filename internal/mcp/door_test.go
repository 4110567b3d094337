package mcp_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

// TestEveryToolEntersAtTheMCPDoor: every kind of tool call the bridge makes — an fs tool, a
// composed tool's invokeTool calls, a capability action, a room tool — names its MCP client,
// so that the daemon's gate sees it at the mcp door: its metrics count each at door mcp and
// none at the socket door.
func TestEveryToolEntersAtTheMCPDoor(t *testing.T) {
	e := startEnvWith(t, daemontest.Options{Args: []string{"--metrics", "127.0.0.1:0"}})
	fsp := startFS(t)
	e.registerLamp(t)
	waitRooms(t, e)
	var st struct {
		HostID string `json:"hostId"`
	}
	roomData(t, e.c, "roomStatus", map[string]any{}, &st)
	roomData(t, e.c, "createRoom", map[string]any{"room": "home"}, nil)
	roomData(t, e.c, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp",
		"actions": []string{"set_power"}, "observe": true}, nil)
	desc := fsp.grant(t, e.host, e.root, "agent", 1, "fs.list,fs.read")
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: map[string]any{
		"cwd": e.root, "session": map[string]any{"mode": "memory"}, "room": "home",
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": desc}}}}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})
	waitFor(t, "the room's tools", func() bool {
		if err := cn.b.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cn.tools(t)["room_desk_lamp_set_power"] != nil
	})
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs_list", map[string]any{"path": "."}},
		{"fs_tree", map[string]any{"path": "."}},
		{"desk_lamp_set_power", map[string]any{"on": true}},
		{"room_desk_lamp_set_power", map[string]any{"on": false}},
	} {
		if r := cn.call(t, c.tool, c.args); r.IsError {
			t.Fatalf("%s: %s", c.tool, text(r))
		}
	}

	m := regexp.MustCompile(`msg="metrics endpoint listening" addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(e.d.Stderr())
	if m == nil {
		t.Fatalf("no metrics endpoint in the log:\n%s", e.d.Stderr())
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body := string(b)
	for _, line := range []string{
		`airlock_calls_total{action="",capability="",code="ok",door="mcp",operation="fs.list"}`,
		`airlock_calls_total{action="set_power",capability="desk_lamp",code="ok",door="mcp",operation="invoke"} 1`,
		`airlock_room_calls_total{code="ok",door="mcp",operation="invoke"} 1`,
		// The room call reached this host's own provider through the bus.
		`airlock_calls_total{action="set_power",capability="desk_lamp",code="ok",door="room",operation="invoke"} 1`,
	} {
		if !strings.Contains(body, "\n"+line) {
			t.Errorf("metrics lack %s", line)
		}
	}
	// fs_list's call and fs_tree's (at least one) are all at the mcp door.
	if n := regexp.MustCompile(`\nairlock_calls_total\{action="",capability="",code="ok",door="mcp",operation="fs.list"\} (\d+)`).FindStringSubmatch(body); n == nil || n[1] == "1" {
		t.Errorf("fs.list calls at the mcp door: %v", n)
	}
	if strings.Contains(body, `door="socket"`) {
		t.Errorf("a bridge call was counted at the socket door:\n%s", grepLines(body, `door="socket"`))
	}
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
