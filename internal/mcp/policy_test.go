package mcp_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

func policyFile(t *testing.T, doc string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(name, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestPolicyAtTheMCPDoor: a go-sdk client's tool calls pass the daemon's gate. The session's
// policy (set at open from a file) refuses a write under locked/ with policy_denied; one
// under ask/ waits for the operator, who never answers here, so it is refused
// approval_timeout after the daemon's approval timeout; neither reaches airlock-fs; an fs
// tool's description
// says what the policy decides; the host's policy (airlockd --policy) refuses the lamp's
// set_power, which the bridge now sends with its session and client name, while
// set_brightness runs; the session's ask rule on the lamp's observation applies to the
// bridge's observe (it waits, and times out), and not to an owner-socket observe that names
// no session.
func TestPolicyAtTheMCPDoor(t *testing.T) {
	host := policyFile(t, `{"default":"allow","rules":[{"capability":"desk_lamp","actions":["set_power"],"decision":"deny"}]}`)
	e := startEnvWith(t, daemontest.Options{Args: []string{"--policy", host, "--approval-timeout", "2s"}})
	fsp := startFS(t)
	for _, d := range []string{"locked", "ask"} {
		if err := os.Mkdir(filepath.Join(e.root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sess := policyFile(t, `{"name":"guard","default":"allow","rules":[
		{"operations":["fs.write"],"paths":["locked/**"],"decision":"deny"},
		{"operations":["fs.write"],"paths":["ask/**"],"decision":"ask"},
		{"capability":"desk_lamp","actions":["observe"],"decision":"ask"}]}`)
	desc := fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.write")
	p := map[string]any{
		"cwd": e.root, "session": map[string]any{"mode": "memory"}, "policy": map[string]any{"file": sess},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": desc}},
	}
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	e.registerLamp(t)
	cn := e.connect(t, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}})

	tools := cn.tools(t)
	if d := tools["fs_write"].Description; !strings.Contains(d, "policy (guard) decides by path") || !strings.Contains(d, "locked/**: deny") ||
		!strings.Contains(d, "a call that asks waits for the operator's decision") {
		t.Fatalf("fs_write's description: %q", d)
	}
	if d := tools["fs_read"].Description; strings.Contains(d, "policy") {
		t.Fatalf("fs_read's description mentions a policy that allows it: %q", d)
	}

	if r := cn.call(t, "fs_write", map[string]any{"path": "locked/a.txt", "content": "x", "create": true}); errorCode(t, r) != "policy_denied" {
		t.Fatalf("write under locked/: %s", text(r))
	}
	if r := cn.call(t, "fs_write", map[string]any{"path": "ask/a.txt", "content": "x", "create": true}); errorCode(t, r) != "approval_timeout" {
		t.Fatalf("write under ask/: %s", text(r))
	}
	for _, f := range []string{"locked/a.txt", "ask/a.txt"} {
		if _, err := os.Stat(filepath.Join(e.root, f)); !os.IsNotExist(err) {
			t.Fatalf("%s reached the adapter: %v", f, err)
		}
	}
	if r := cn.call(t, "fs_write", map[string]any{"path": "free.txt", "content": "ok", "create": true}); r.IsError {
		t.Fatalf("allowed write: %s", text(r))
	}
	if r := cn.call(t, "desk_lamp_set_power", map[string]any{"on": true}); errorCode(t, r) != "policy_denied" {
		t.Fatalf("set_power: %s", text(r))
	}
	if r := cn.call(t, "desk_lamp_set_brightness", map[string]any{"level": 10}); r.IsError {
		t.Fatalf("set_brightness: %s", text(r))
	}
	// The session's capability rules apply too: the bridge names its session.
	if r := cn.call(t, "desk_lamp_observe", map[string]any{}); errorCode(t, r) != "approval_timeout" {
		t.Fatalf("observe under the session's ask rule: %s", text(r))
	}
	var lamp struct {
		Result struct {
			On         bool `json:"on"`
			Brightness int  `json:"brightness"`
		} `json:"result"`
	}
	if err := call(t, e.c, client.Command{Operation: "observeCapability", Payload: map[string]any{"capabilityId": "desk_lamp"}}).Decode(&lamp); err != nil {
		t.Fatal(err)
	}
	if lamp.Result.On || lamp.Result.Brightness != 10 {
		t.Fatalf("the lamp after the calls: %+v (set_power must never have run)", lamp.Result)
	}
}

// TestComposedToolsSayThePolicy: a composed tool's description says what the session's
// policy decides for the operations it calls, each of which passes the daemon's gate, and
// fs_edit_preview's for the fs.edit whose change it shows; a tool whose operations the
// policy allows says nothing of it. They said nothing: fs_tree under a rule that asks before
// fs.list asked the operator at every directory, unannounced, and fs_edit_preview under
// read-only offered a digest for an fs_edit that is refused.
func TestComposedToolsSayThePolicy(t *testing.T) {
	e := startDirEnv(t)
	for _, c := range []struct {
		policy string
		says   map[string]string // tool → what its description says, "" for nothing of a policy
	}{
		{"read-only", map[string]string{
			"fs_edit_preview": "The session's policy (read-only) denies fs.edit, which fs_edit calls to make the change shown: every call is refused policy_denied.",
			"fs_tree":         "", "fs_head": "",
		}},
		{policyFile(t, `{"name":"listing","default":"allow","rules":[{"operations":["fs.list"],"decision":"ask"},
			{"operations":["fs.read"],"paths":["secret/**"],"decision":"deny"}]}`), map[string]string{
			"fs_tree":         "The session's policy (listing) asks the operator before fs.list, which this tool calls: a call that asks waits",
			"fs_find":         "asks the operator before fs.list, which this tool calls",
			"fs_read_many":    "The session's policy (listing) decides fs.read, which this tool calls, by path (",
			"fs_tail":         "decides fs.read, which this tool calls, by path (",
			"fs_edit_preview": "decides fs.read, which this tool calls, by path (",
		}},
	} {
		t.Run(filepath.Base(c.policy), func(t *testing.T) {
			cs, _ := connectDir(t, e, "--policy", c.policy)
			lt, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			desc := map[string]string{}
			for _, tl := range lt.Tools {
				desc[tl.Name] = tl.Description
			}
			for tool, says := range c.says {
				d, ok := desc[tool]
				switch {
				case !ok:
					t.Errorf("%s is not listed", tool)
				case says == "" && strings.Contains(d, "policy"):
					t.Errorf("%s: %q speaks of a policy that allows what it calls", tool, d)
				case !strings.Contains(d, says):
					t.Errorf("%s: %q does not say %q", tool, d, says)
				}
			}
		})
	}
}
