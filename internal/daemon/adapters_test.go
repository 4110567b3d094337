package daemon_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

func TestBinaryCapabilityAdapters(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	t.Setenv("AIRLOCK_TEST_SECRET", "do-not-leak-7f3a")
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()

	r := call(t, c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": lamp}})
	var reg struct {
		Adapter struct {
			State        string   `json:"state"`
			PID          int      `json:"pid"`
			Capabilities []string `json:"capabilities"`
		} `json:"adapter"`
	}
	if err := r.Decode(&reg); err != nil || reg.Adapter.State != "ready" || reg.Adapter.PID == 0 ||
		len(reg.Adapter.Capabilities) != 1 || reg.Adapter.Capabilities[0] != "desk_lamp" {
		t.Fatalf("register: %v %+v", err, reg)
	}

	var obs struct {
		Result struct {
			On         bool `json:"on"`
			Brightness int  `json:"brightness"`
		} `json:"result"`
	}
	r = call(t, c, client.Command{Operation: "invokeCapability", Payload: map[string]any{
		"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": true}}})
	if err := r.Decode(&obs); err != nil || !obs.Result.On {
		t.Fatalf("invoke set_power: %v %+v", err, obs)
	}
	if err := call(t, c, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "desk_lamp"}}).Decode(&obs); err != nil ||
		!obs.Result.On || obs.Result.Brightness != 60 {
		t.Fatalf("observe: %v %+v", err, obs)
	}
	refusals := []struct {
		payload map[string]any
		code    string
	}{
		{map[string]any{"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": "yes"}}, "invalid_args"},
		{map[string]any{"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": true, "extra": 1}}, "invalid_args"},
		{map[string]any{"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{}}, "invalid_args"},
		{map[string]any{"capabilityId": "desk_lamp", "action": "explode", "args": map[string]any{}}, "unsupported_action"},
		{map[string]any{"capabilityId": "no_such_thing", "action": "set_power", "args": map[string]any{"on": true}}, "unknown_capability"},
	}
	for _, tc := range refusals {
		if r := call(t, c, client.Command{Operation: "invokeCapability", Payload: tc.payload}); code(r) != tc.code {
			t.Errorf("invoke %v: %s, want %s", tc.payload, code(r), tc.code)
		}
	}

	// The registration is persisted: a restart brings the adapter back.
	d.Stop()
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c2 := d2.Dial()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var caps struct {
			Capabilities []struct {
				CapabilityID string `json:"capabilityId"`
				Available    bool   `json:"available"`
			} `json:"capabilities"`
		}
		if err := call(t, c2, client.Command{Operation: "listCapabilities"}).Decode(&caps); err != nil {
			t.Fatal(err)
		}
		if len(caps.Capabilities) == 1 && caps.Capabilities[0].Available {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("adapter not restored after restart: %+v", caps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Host status (2.x) shows the adapter; nothing the adapter or its environment holds leaks.
	r = call(t, c2, client.Command{Operation: "status"})
	if !strings.Contains(string(r.Data), `"adapters":[{"name":"lamp"`) {
		t.Fatalf("status lacks the adapter: %s", r.Data)
	}
	logs := call(t, c2, client.Command{Operation: "adapterLogs", Payload: map[string]any{"name": "lamp"}})
	if !logs.OK {
		t.Fatal(logs.Err())
	}
	if r := call(t, c2, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
		t.Fatal(r.Err())
	}
	if r := call(t, c2, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "desk_lamp"}}); code(r) != "unknown_capability" {
		t.Fatalf("observe after remove: %s", code(r))
	}
	if r := call(t, c2, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); code(r) == "" {
		t.Fatal("removing an absent adapter succeeded")
	}
	d2.Stop()
	for _, out := range []string{d.Stderr(), d2.Stderr()} {
		if strings.Contains(out, os.Getenv("AIRLOCK_TEST_SECRET")) {
			t.Fatal("the daemon's environment secret reached its log")
		}
	}
}

func TestBinaryAdapterRegistrationRefusals(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	cases := []struct {
		name    string
		payload map[string]any
	}{
		{"missing command", map[string]any{"name": "x", "command": "/nonexistent/adapter"}},
		{"not an adapter", map[string]any{"name": "x", "command": "/bin/true"}},
		{"NUL in an argument", map[string]any{"name": "x", "command": "/bin/cat", "args": []string{"a\x00b"}}},
		{"too many arguments", map[string]any{"name": "x", "command": "/bin/cat", "args": make([]string, 17)}},
	}
	for _, tc := range cases {
		r := call(t, c, client.Command{Operation: "registerAdapter", Payload: tc.payload})
		if r.OK {
			t.Errorf("%s: registered", tc.name)
		}
	}
	var list struct {
		Adapters []any `json:"adapters"`
	}
	if err := call(t, c, client.Command{Operation: "listAdapters"}).Decode(&list); err != nil || len(list.Adapters) != 0 {
		t.Fatalf("refused registrations left adapters behind: %v %+v", err, list)
	}
	// A v1 client does not see the 2.x operations.
	c1 := d.Dial()
	c1.SetVersion("1.0")
	if r := call(t, c1, client.Command{Operation: "listCapabilities"}); code(r) != "unknown_operation" {
		t.Fatalf("v1 listCapabilities: %s", code(r))
	}
}

// TestBinaryAdapterWithMissingCommandCanBeRemoved: a stored registration whose command is gone
// at startup is not restored, is logged by name, and can still be removed.
func TestBinaryAdapterWithMissingCommandCanBeRemoved(t *testing.T) {
	built := daemontest.Build(t, "./examples/adapters/go-lamp")
	dir := daemontest.ShortDir(t)
	lamp := filepath.Join(dir, "lamp")
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(lamp, b, 0o755)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	if r := call(t, c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": lamp}}); !r.OK {
		t.Fatal(r.Err())
	}
	d.Stop()
	os.Remove(lamp)
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c2 := d2.Dial()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d2.Stderr(), "adapter=lamp") {
		if time.Now().After(deadline) {
			t.Fatalf("the failed restore is not logged by name:\n%s", d2.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := call(t, c2, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
		t.Fatalf("remove of a registration that never ran: %v", r.Err())
	}
	d2.Stop()
	d3 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	var list struct {
		Adapters []any `json:"adapters"`
	}
	if err := call(t, d3.Dial(), client.Command{Operation: "listAdapters"}).Decode(&list); err != nil || len(list.Adapters) != 0 {
		t.Fatalf("the removed registration came back: %v %+v", err, list)
	}
	// A draining host starts no new adapter.
	c3 := d3.Dial()
	call(t, c3, client.Command{Operation: "drain", Payload: map[string]any{"timeoutMs": 0}})
	if r := call(t, c3, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": built}}); code(r) != "host_draining" {
		t.Fatalf("register while draining: %s", code(r))
	}
}

// TestKilledDaemonLeavesNoAdapterRunning: an adapter that ignores its stdin closing and
// leaves a helper in its process group does not outlive a daemon killed with SIGKILL. The
// kernel kills the adapter itself at once (its parent-death signal); the helper runs on until
// the daemon starts again, which kills it before it starts the adapter anew, so that one copy
// runs.
func TestKilledDaemonLeavesNoAdapterRunning(t *testing.T) {
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	dir := daemontest.ShortDir(t)
	helperFile := filepath.Join(dir, "helper.pid")
	script := filepath.Join(dir, "stubborn-lamp")
	os.WriteFile(script, []byte("#!/bin/sh\n"+
		"sleep 100000 &\n"+
		"echo $! > "+helperFile+"\n"+
		lamp+"\n"+
		"exec sleep 100000\n"), 0o755)
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	var reg struct {
		Adapter struct {
			PID int `json:"pid"`
		} `json:"adapter"`
	}
	if err := call(t, c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": script}}).Decode(&reg); err != nil || reg.Adapter.PID == 0 {
		t.Fatalf("register: %v %+v", err, reg)
	}
	b, err := os.ReadFile(helperFile)
	if err != nil {
		t.Fatal(err)
	}
	helper, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	leader, helperProc := daemontest.Watch(t, reg.Adapter.PID), daemontest.Watch(t, helper)
	t.Cleanup(func() { syscall.Kill(-reg.Adapter.PID, syscall.SIGKILL) })

	d.Kill9()
	if !leader.Exited(30 * time.Second) {
		t.Fatal("the adapter outlived the daemon killed with SIGKILL")
	}
	if helperProc.Exited(0) {
		t.Fatal("the helper exited with the daemon: this test no longer shows the restart's part")
	}
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	if !helperProc.Exited(30 * time.Second) {
		t.Fatalf("the restarted daemon left the helper running:\n%s", d2.Stderr())
	}
	if !strings.Contains(d2.Stderr(), "killed an adapter process group left running") {
		t.Fatalf("the restart does not log what it killed:\n%s", d2.Stderr())
	}
	waitAdapters(t, d2.Dial(), "the adapter started anew", func(m map[string]adapterView) bool {
		return m["lamp"].State == "ready" && m["lamp"].PID != 0 && m["lamp"].PID != reg.Adapter.PID
	})
}
