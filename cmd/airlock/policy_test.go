package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// sessionPolicy guards a session's files: writes under locked/ denied, under ask/ asked,
// reads of .env* denied. hostPolicy denies the lamp's set_power at every door.
const (
	sessionPolicy = `{"name": "guard", "default": "allow", "rules": [
  {"operations": ["fs.write", "fs.edit"], "paths": ["locked/**"], "decision": "deny", "why": "locked tree"},
  {"operations": ["fs.write"], "paths": ["ask/**"], "decision": "ask"},
  {"operations": ["fs.read", "fs.search"], "paths": [".env*", "**/.env*"], "decision": "deny"}],
 "examples": [
  {"operation": "fs.write", "path": "locked/a.txt", "expect": "deny"},
  {"operation": "fs.write", "path": "a.txt", "expect": "allow"},
  {"operation": "fs.read", "path": ".env", "expect": "deny"}]}`
	hostPolicy = `{"name": "house", "default": "allow", "rules": [
  {"capability": "desk_lamp", "actions": ["set_power"], "decision": "deny", "why": "the lamp stays as it is"}],
 "examples": [{"capability": "desk_lamp", "action": "set_power", "expect": "deny"},
  {"capability": "desk_lamp", "action": "set_brightness", "expect": "allow"}]}`
)

func writePolicy(t *testing.T, doc string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(name, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestPolicyDeniedAtTheSocketCapabilityAndRoomDoors runs two real airlockd, A with a host
// policy, B joined to A's room: a session's fs calls on A's owner socket obey the session's
// policy (deny, ask — waiting in the approval queue until the operator denies it —, allow) and
// a denied one never reaches airlock-fs; A's
// host policy refuses the lamp's set_power to a local cap invoke, to B's room call and to A's
// own room call of its publication, while set_brightness runs at each door.
func TestPolicyDeniedAtTheSocketCapabilityAndRoomDoors(t *testing.T) {
	daemontest.Binary(t, "airlock-fs") // beside airlockd, where it runs it from
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := startRoomHost(t, "--policy", writePolicy(t, hostPolicy))
	var sa roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket)

	// The owner socket's invokeTool, under the session's policy.
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, ".env"), []byte("TOKEN=canary-7f3a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"locked", "ask"} {
		if err := os.Mkdir(filepath.Join(cwd, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	a.cli("", "session", "open", "guarded", "--generation", "1", "--cwd", cwd, "--mode", "memory",
		"--fs-ops", "fs.read,fs.write,fs.list", "--policy", writePolicy(t, sessionPolicy)).wantCode(t, exitOK)
	refusedTool(t, a, "policy_denied", "guarded", "fs.write", "--generation", "1", "--arg", "path=locked/a.txt", "--arg", "content=x", "--arg", "create=true")
	if _, err := os.Stat(filepath.Join(cwd, "locked", "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the denied write reached the adapter: %v", err)
	}
	// An asked write waits in the approval queue, shows in airlock approvals with the rule,
	// and is refused approval_denied when the operator denies it.
	asked := make(chan result, 1)
	go func() {
		asked <- cli(t, a.d.Socket, "", "tool", "guarded", "fs.write", "--generation", "1", "--arg", "path=ask/a.txt", "--arg", "content=x", "--arg", "create=true", "--json")
	}()
	var pending struct {
		Approvals []struct {
			ID     string `json:"id"`
			Target string `json:"target"`
			Path   string `json:"path"`
			Reason string `json:"reason"`
		} `json:"approvals"`
	}
	waitFor(t, "the asked write in the queue", func() bool {
		a.data(&pending, "approvals")
		return len(pending.Approvals) == 1
	})
	if p := pending.Approvals[0]; p.Target != "fs.write" || p.Path != "ask/a.txt" || p.Reason != "session policy rule 2: ask fs.write" {
		t.Fatalf("the waiting write: %+v", p)
	}
	a.cli("", "deny", pending.Approvals[0].ID).wantCode(t, exitOK)
	r := <-asked
	if env := envelopeOf(t, r, "tool", false); env.Error.Code != "approval_denied" {
		t.Fatalf("the denied write: %s\n%s", env.Error.Code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(cwd, "ask", "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("the denied write ran: %v", err)
	}
	r = a.cli("", "tool", "guarded", "fs.read", "--generation", "1", "--arg", "path=.env", "--json")
	if env := envelopeOf(t, r, "tool", false); env.Error.Code != "policy_denied" || strings.Contains(r.stdout+r.stderr, "canary-7f3a") {
		t.Fatalf("read of .env: %s\n%s%s", env.Error.Code, r.stdout, r.stderr)
	}
	a.cli("", "tool", "guarded", "fs.write", "--generation", "1", "--arg", "path=free.txt", "--arg", "content=ok", "--arg", "create=true").wantCode(t, exitOK)
	if b, err := os.ReadFile(filepath.Join(cwd, "free.txt")); err != nil || string(b) != "ok" {
		t.Fatalf("the allowed write: %q, %v", b, err)
	}
	show := a.cli("", "session", "show", "guarded").wantCode(t, exitOK)
	if !strings.Contains(show.stdout, "guard: ") || !strings.Contains(show.stdout, "fs.write allow or ask or deny by path") {
		t.Fatalf("session show lacks the rules:\n%s", show.stdout)
	}
	// An open naming no such policy, or a file whose examples fail, is refused.
	a.refused("invalid_policy", "session", "open", "other", "--generation", "1", "--cwd", cwd, "--policy", "no-such-policy")
	if r := a.cli("", "session", "open", "other", "--generation", "1", "--cwd", cwd, "--policy", "read_only"); !strings.Contains(r.stderr,
		`no built-in policy is named "read_only": the built-in policies are allow-all, ask-writes, deny-all, read-only; a policy file is named by a path with a / (./read_only)`) {
		t.Fatalf("an unknown policy name does not list the built-in ones: %q", r.stderr)
	}
	bad := writePolicy(t, `{"default":"allow","examples":[{"operation":"fs.write","path":"a","expect":"deny"}]}`)
	a.refused("invalid_policy", "session", "open", "other", "--generation", "1", "--cwd", cwd, "--policy", bad)

	// A local capability call, under the host's policy.
	a.cli("", "adapter", "register", "lamp", "--", lamp).wantCode(t, exitOK)
	a.refused("policy_denied", "cap", "invoke", "--id", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`)
	a.data(nil, "cap", "invoke", "--id", "desk_lamp", "--action", "set_brightness", "--args", `{"level":40}`)

	// A room call A provides: B's, and A's own.
	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home", "--name", "bob")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	a.cli("", "room", "publish", "--room", "home", "--cap", "desk_lamp", "--actions", "set_power,set_brightness", "--observe").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see the lamp", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})
	b.refused("policy_denied", "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`)
	a.refused("policy_denied", "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`, "--provider", sa.HostID)
	var call struct {
		Result struct {
			On         bool `json:"on"`
			Brightness int  `json:"brightness"`
		} `json:"result"`
	}
	b.data(&call, "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_brightness", "--args", `{"level":70}`)
	b.data(&call, "room", "observe", "--room", "home", "--cap", "desk_lamp")
	if call.Result.On || call.Result.Brightness != 70 {
		t.Fatalf("the lamp after the calls: %+v (set_power must never have run)", call.Result)
	}
}

// refusedTool runs airlock tool ARGS… --json, which the daemon must refuse with code.
func refusedTool(t *testing.T, h *roomHost, code string, args ...string) {
	t.Helper()
	r := h.cli("", append(append([]string{"tool"}, args...), "--json")...)
	if env := envelopeOf(t, r, "tool", false); env.Error.Code != code {
		t.Fatalf("tool %v: refused %s, want %s\n%s%s", args, env.Error.Code, code, r.stdout, r.stderr)
	}
}

// TestPolicyCheckCommand: airlock policy check passes a valid file whose examples pass, and
// fails with the field or the failing example otherwise.
func TestPolicyCheckCommand(t *testing.T) {
	ok := writePolicy(t, sessionPolicy)
	r := cli(t, "/nonexistent.sock", "", "policy", "check", ok).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "valid, 3 rules, 3 examples pass") {
		t.Fatalf("policy check: %q", r.stdout)
	}
	one := writePolicy(t, `{"default":"deny","rules":[{"operations":["fs.read"],"decision":"allow"}],"examples":[{"operation":"fs.read","path":"a","expect":"allow"}]}`)
	if r := cli(t, "/nonexistent.sock", "", "policy", "check", one).wantCode(t, exitOK); !strings.Contains(r.stdout, "valid, 1 rule, 1 example passes") {
		t.Fatalf("policy check of one rule and one example: %q", r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "policy", "check", "--json", writePolicy(t, `{"default":"allow","rules":[{"operations":["fs.wirte"],"decision":"deny"}]}`))
	if env := envelopeOf(t, r, "policy check", false); env.Error.Code != "invalid_policy" || !strings.Contains(r.stdout, `"field": "rules[0].operations[0]"`) {
		t.Fatalf("a bad operation: %s\n%s", env.Error.Code, r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "policy", "check", writePolicy(t, `{"default":"allow","examples":[{"capability":"lamp","action":"on","expect":"ask"}]}`))
	if r.code != exitFailure || !strings.Contains(r.stderr, "example 1: lamp.on expects ask, gets allow (the default)") || !strings.Contains(r.stderr, "policy_examples_failed") {
		t.Fatalf("a failing example: %d %q", r.code, r.stderr)
	}
}
