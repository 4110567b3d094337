package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// auditJSON runs airlock audit --json on a host's journal and decodes its lines.
func auditJSON(t *testing.T, h *roomHost, args ...string) []audit.Record {
	t.Helper()
	r := cli(t, "/nonexistent.sock", "", append([]string{"audit", "--dir", audit.DirIn(h.d.StateDir), "--json"}, args...)...).wantCode(t, exitOK)
	var out []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		rec, err := audit.DecodeRecord([]byte(line))
		if err != nil {
			t.Fatalf("audit --json line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// effect is the started record of op (and capability action) in recs and its outcome.
func effect(t *testing.T, recs []audit.Record, op, action string) (started, outcome audit.Record) {
	t.Helper()
	for _, r := range recs {
		if r.Target == nil || r.Target.Op != op || r.Target.Action != action {
			continue
		}
		switch {
		case r.Kind == audit.KindStarted && started.Seq == 0:
			started = r
		case r.Kind == audit.KindOutcome && started.Seq != 0 && r.Ref == started.Seq:
			return started, r
		}
	}
	t.Fatalf("no started and outcome records of %s %s in %d records", op, action, len(recs))
	return
}

func hasEvent(recs []audit.Record, kind audit.Kind, op, outcome string) bool {
	for _, r := range recs {
		if r.Kind == kind && r.Target != nil && r.Target.Op == op && r.Outcome == outcome {
			return true
		}
	}
	return false
}

// TestAuditJournalRecordsEveryDoor runs two real airlockd, B joined to A's bus with
// --nats-via and to A's room, and reads their journals back with airlock audit --json: a
// session's fs.write on A, a local capability invoke on A, the policy's refusal of another
// (a decision, nothing started), B's room call of A's lamp (B's "room call made", A's "room
// call provided") each appear with the door, actor (pid and executable, session and
// generation, room and host), target, arguments' digest, idempotency key's digest, outcome
// and duration; the session, grant, adapter, room and bus events are there; B keeps the
// arguments (--audit-args), A only their digest; neither journal holds the join code or the
// written content; airlock audit verify passes both.
func TestAuditJournalRecordsEveryDoor(t *testing.T) {
	daemontest.Binary(t, "airlock-fs")
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := startRoomHost(t, "--policy", writePolicy(t, hostPolicy))
	var sa, sb roomStatusData
	a.data(&sa, "room", "status")
	b := startRoomHost(t, "--nats-via", a.d.Socket, "--audit-args")
	b.data(&sb, "room", "status")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self, _ = filepath.EvalSymlinks(self)

	const content = "audit-canary-5d1e"
	cwd := t.TempDir()
	a.cli("", "session", "open", "writer", "--generation", "3", "--cwd", cwd, "--mode", "memory", "--fs-ops", "fs.write").wantCode(t, exitOK)
	a.cli("", "tool", "writer", "fs.write", "--generation", "3", "--arg", "path=notes.txt", "--arg", "content="+content, "--arg", "create=true").wantCode(t, exitOK)
	a.cli("", "adapter", "register", "lamp", "--", lamp).wantCode(t, exitOK)
	a.data(nil, "cap", "invoke", "--id", "desk_lamp", "--action", "set_brightness", "--args", `{"level":40}`)
	a.refused("policy_denied", "cap", "invoke", "--id", "desk_lamp", "--action", "set_power", "--args", `{"on":true}`)

	a.cli("", "room", "create", "home").wantCode(t, exitOK)
	var inv struct {
		Code string `json:"code"`
	}
	a.data(&inv, "room", "invite", "home", "--name", "bob")
	b.cli(inv.Code+"\n", "room", "join", "-").wantCode(t, exitOK)
	a.cli("", "room", "publish", "--room", "home", "--cap", "desk_lamp", "--actions", "set_brightness").wantCode(t, exitOK)
	var caps struct {
		Capabilities []roomCapData `json:"capabilities"`
	}
	waitFor(t, "B to see the lamp", func() bool {
		b.data(&caps, "room", "caps", "--room", "home")
		return described(caps.Capabilities, 1)
	})
	b.data(nil, "room", "invoke", "--room", "home", "--cap", "desk_lamp", "--action", "set_brightness", "--args", `{"level":70}`)

	ra, rb := auditJSON(t, a), auditJSON(t, b)
	level40, _ := audit.ArgsDigest(json.RawMessage(`{"level":40}`))
	level70, _ := audit.ArgsDigest(json.RawMessage(`{"level":70}`))

	// The session's write, at the owner socket.
	st, out := effect(t, ra, "fs.write", "")
	if st.Door != audit.DoorOwner || st.Actor == nil || st.Actor.PID != os.Getpid() || st.Actor.Exe != self ||
		st.Actor.Session != "writer" || st.Actor.Generation != 3 || st.Target.Path != "notes.txt" {
		t.Errorf("fs.write started: door %s actor %+v target %+v (want pid %d exe %s)", st.Door, st.Actor, st.Target, os.Getpid(), self)
	}
	if len(st.ArgsSHA256) != 64 || st.ArgsBytes == 0 || st.Args != nil || len(st.IdempotencyKeySHA256) != 64 {
		t.Errorf("fs.write started keeps args %s (%d bytes) %s, key %s", st.ArgsSHA256, st.ArgsBytes, st.Args, st.IdempotencyKeySHA256)
	}
	if out.Outcome != "ok" || out.DurationUS <= 0 {
		t.Errorf("fs.write outcome: %+v", out)
	}
	// The local capability invoke, and the policy's refusal of another.
	st, out = effect(t, ra, "capability.invoke", "set_brightness")
	if st.Door != audit.DoorOwner || st.Actor.PID != os.Getpid() || st.Target.Capability != "desk_lamp" || st.ArgsSHA256 != level40 || out.Outcome != "ok" {
		t.Errorf("cap invoke: %+v %+v %+v", st, st.Target, out)
	}
	for _, r := range ra {
		if r.Target != nil && r.Target.Action == "set_power" && r.Kind != audit.KindDecision {
			t.Errorf("the refused set_power has a %s record", r.Kind)
		}
	}
	if !hasEvent(ra, audit.KindDecision, "capability.invoke", "policy_denied") {
		t.Error("no decision record of the refused set_power")
	}
	// B's room call: made at B, provided at A.
	st, out = effect(t, rb, "room.call.made", "set_brightness")
	if st.Door != audit.DoorOwner || st.Actor.PID != os.Getpid() || st.Actor.Room != "home" || st.Actor.Host != sa.HostID ||
		st.Target.Capability != "desk_lamp" || st.ArgsSHA256 != level70 || string(st.Args) != `{"level":70}` || out.Outcome != "ok" || out.DurationUS <= 0 {
		t.Errorf("room call made at B: %+v actor %+v target %+v args %s; outcome %+v", st, st.Actor, st.Target, st.Args, out)
	}
	st, out = effect(t, ra, "room.call.provided", "set_brightness")
	if st.Door != audit.DoorRoom || st.Actor.Room != "home" || st.Actor.Host != sb.HostID || st.Target.Capability != "desk_lamp" ||
		st.ArgsSHA256 != level70 || st.Args != nil || out.Outcome != "ok" {
		t.Errorf("room call provided at A: %+v actor %+v target %+v; outcome %+v", st, st.Actor, st.Target, out)
	}
	// The events.
	for _, op := range []string{"session.open", "session.grant", "adapter.register", "room.create", "room.publish", "bus.admit"} {
		if !hasEvent(ra, audit.KindEvent, op, "ok") {
			t.Errorf("A's journal has no %s event", op)
		}
	}
	if !hasEvent(rb, audit.KindEvent, "room.join", "ok") {
		t.Error("B's journal has no room.join event")
	}
	// --session and --door select.
	for _, r := range auditJSON(t, a, "--session", "writer") {
		if r.Actor == nil || r.Actor.Session != "writer" {
			t.Errorf("--session writer printed %+v", r)
		}
	}
	for _, r := range auditJSON(t, a, "--door", "room") {
		if r.Door != audit.DoorRoom {
			t.Errorf("--door room printed %+v", r)
		}
	}

	// No secret, and no content without --audit-args.
	for _, h := range []*roomHost{a, b} {
		assertNotInDir(t, audit.DirIn(h.d.StateDir), inv.Code)
		assertNotInDir(t, audit.DirIn(h.d.StateDir), content)
		r := cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", audit.DirIn(h.d.StateDir)).wantCode(t, exitOK)
		if !strings.Contains(r.stdout, "intact") {
			t.Errorf("audit verify: %s", r.stdout)
		}
	}
}

// assertNotInDir fails when secret appears in any file under dir.
func assertNotInDir(t *testing.T, dir, secret string) {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		n++
		if b, _ := os.ReadFile(p); strings.Contains(string(b), secret) {
			t.Errorf("%s holds %q", p, secret)
		}
		return nil
	})
	if n == 0 {
		t.Errorf("no file under %s to scan", dir)
	}
}
