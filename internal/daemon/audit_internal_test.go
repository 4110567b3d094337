package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/gate"
	"github.com/airlockhq/airlock/internal/policy"
)

// readJournal returns every effect, decision and event record in dir, oldest first.
func readJournal(t *testing.T, dir string) []audit.Record {
	t.Helper()
	var out []audit.Record
	if err := audit.Read(context.Background(), dir, audit.Query{}, false, func(_ []byte, r *audit.Record) error {
		out = append(out, *r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func openTestAudit(t *testing.T) (*auditLog, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	j, _, err := audit.Open(dir, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return &auditLog{j: j, log: slog.New(slog.DiscardHandler)}, dir
}

// TestAuditHookRecordsCallsAndDecisions: at the gate, the journal's hook writes a started
// record before an allowed call runs and its outcome (ref, code, duration) when it ends; a
// call the policy denies is one decision record and nothing started; the actor, target,
// arguments' digest and idempotency key's digest are the call's. Once the journal cannot
// write, the gate refuses the call with record_failed and it never runs.
func TestAuditHookRecordsCallsAndDecisions(t *testing.T) {
	a, dir := openTestAudit(t)
	host, err := policy.Parse([]byte(`{"default":"allow","rules":[{"capability":"lamp","actions":["set_power"],"decision":"deny"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := gate.New(gate.Config{Host: host, Hooks: []gate.Hook{a}})
	ctx := context.Background()
	args := json.RawMessage(`{"path":"a.txt", "content":"x"}`)
	write := gate.Call{Actor: gate.Actor{Door: gate.DoorMCP, PID: os.Getpid(), Session: "s", Generation: 2, Client: "claude-code"},
		Kind: gate.KindTool, Operation: "fs.write", Path: "a.txt", Args: args, Key: "fs.write:call-1"}
	if e := g.Check(ctx, &write, nil); e != nil {
		t.Fatalf("allowed write refused: %v", e)
	}
	g.Done(&write, "digest_mismatch")
	power := gate.Call{Actor: gate.Actor{Door: gate.DoorRoom, Room: "home", Host: "hostB"},
		Kind: gate.KindInvoke, Capability: "lamp", Action: "set_power", Args: json.RawMessage(`{"on":true}`)}
	if e := g.Check(ctx, &power, nil); e == nil || e.Code != gate.CodePolicyDenied {
		t.Fatalf("denied call: %v", e)
	}

	recs := readJournal(t, dir)
	if len(recs) != 3 {
		t.Fatalf("%d records, want started, outcome, decision: %+v", len(recs), recs)
	}
	st, out, dec := recs[0], recs[1], recs[2]
	exe, _ := os.Executable()
	wantDigest, _ := audit.ArgsDigest(args)
	switch {
	case st.Kind != audit.KindStarted || st.Door != audit.DoorMCP || st.Target.Op != "fs.write" || st.Target.Path != "a.txt":
		t.Errorf("started: %+v %+v", st, st.Target)
	case st.Actor == nil || st.Actor.PID != os.Getpid() || st.Actor.Exe != exe || st.Actor.Session != "s" || st.Actor.Generation != 2 || st.Actor.MCPClient != "claude-code":
		t.Errorf("started actor: %+v, want pid %d exe %s", st.Actor, os.Getpid(), exe)
	case st.ArgsSHA256 != wantDigest || st.Args != nil:
		t.Errorf("started args: %s %s", st.ArgsSHA256, st.Args)
	case st.IdempotencyKeySHA256 != audit.Digest([]byte("fs.write:call-1")):
		t.Errorf("started key digest: %s", st.IdempotencyKeySHA256)
	}
	if out.Kind != audit.KindOutcome || out.Ref != st.Seq || out.Outcome != "digest_mismatch" || out.ArgsSHA256 != "" {
		t.Errorf("outcome: %+v", out)
	}
	if dec.Kind != audit.KindDecision || dec.Door != audit.DoorRoom || dec.Outcome != gate.CodePolicyDenied ||
		dec.Target.Op != auditOpRoomProvide || dec.Target.Capability != "lamp" || dec.Target.Action != "set_power" ||
		dec.Actor.Room != "home" || dec.Actor.Host != "hostB" {
		t.Errorf("decision: %+v %+v %+v", dec, dec.Target, dec.Actor)
	}

	// A journal that cannot write refuses the call before it runs.
	a.j.Close()
	read := gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindTool, Operation: "fs.read", Path: "a.txt", Args: args}
	if e := g.Check(ctx, &read, nil); e == nil || e.Code != gate.CodeRecordFailed {
		t.Fatalf("unrecordable call: %v, want %s", e, gate.CodeRecordFailed)
	}
}

// TestAuditOneSyncPerCall: a call's started record is written, not synced, before the
// adapter gets the call (Before); its outcome's record, before the answer leaves (After),
// makes both durable with one fdatasync.
func TestAuditOneSyncPerCall(t *testing.T) {
	a, dir := openTestAudit(t)
	g := gate.New(gate.Config{Hooks: []gate.Hook{a}})
	c := gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindTool, Operation: "fs.write", Path: "a.txt",
		Args: json.RawMessage(`{"path":"a.txt","content":"x"}`)}
	before := a.j.Stats()
	if e := g.Check(context.Background(), &c, nil); e != nil {
		t.Fatalf("refused: %v", e)
	}
	mid := a.j.Stats()
	if mid.Fsyncs != before.Fsyncs || mid.Records != before.Records+1 {
		t.Fatalf("before the adapter: %d fdatasyncs and %d records, want 0 and 1", mid.Fsyncs-before.Fsyncs, mid.Records-before.Records)
	}
	if recs := readJournal(t, dir); len(recs) != 1 || recs[0].Kind != audit.KindStarted {
		t.Fatalf("the started record is not written before the adapter: %+v", recs)
	}
	g.Done(&c, "")
	after := a.j.Stats()
	if after.Fsyncs != before.Fsyncs+1 || after.Records != before.Records+2 {
		t.Fatalf("a call made %d fdatasyncs for %d records, want 1 for 2", after.Fsyncs-before.Fsyncs, after.Records-before.Records)
	}
}

// TestAuditEventWritesEventsAndDecisions: Server.auditEvent writes an event (outcome ok
// when none is given) and a decision with its outcome, for the approval queue to call; it
// does nothing without a journal.
func TestAuditEventWritesEventsAndDecisions(t *testing.T) {
	a, dir := openTestAudit(t)
	s := &Server{audit: a}
	s.auditEvent(audit.KindEvent, audit.DoorDaemon, audit.Actor{Session: "s", Generation: 1}, audit.Target{Op: "adapter.remove", Adapter: "lamp"}, "")
	s.auditEvent(audit.KindDecision, audit.DoorWeb, audit.Actor{Room: "home", Host: "hostB"},
		audit.Target{Op: "approval.decided", Capability: "printer", Action: "print"}, "approved")
	(&Server{}).auditEvent(audit.KindEvent, audit.DoorDaemon, audit.Actor{}, audit.Target{Op: "session.open"}, "")

	recs := readJournal(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d records: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Kind != audit.KindEvent || r.Outcome != "ok" || r.Target.Op != "adapter.remove" || r.Target.Adapter != "lamp" || r.Door != audit.DoorDaemon {
		t.Errorf("event: %+v %+v", r, r.Target)
	}
	if r := recs[1]; r.Kind != audit.KindDecision || r.Outcome != "approved" || r.Target.Op != "approval.decided" || r.Door != audit.DoorWeb || r.Actor.Room != "home" {
		t.Errorf("decision: %+v %+v", r, r.Target)
	}
}

// TestAuditKeepsAPathItCannotNameAsItsDigest: a path with a character the journal refuses
// (a newline) does not refuse the call: the record drops the path, and the arguments'
// digest still pins it.
func TestAuditKeepsAPathItCannotNameAsItsDigest(t *testing.T) {
	a, dir := openTestAudit(t)
	g := gate.New(gate.Config{Hooks: []gate.Hook{a}})
	c := gate.Call{Actor: gate.Actor{Door: gate.DoorSocket}, Kind: gate.KindTool, Operation: "fs.stat", Path: "a\nb",
		Args: json.RawMessage(`{"path":"a\nb"}`)}
	if e := g.Check(context.Background(), &c, nil); e != nil {
		t.Fatalf("refused: %v", e)
	}
	g.Done(&c, "")
	recs := readJournal(t, dir)
	if len(recs) != 2 || recs[0].Target.Path != "" || recs[0].ArgsSHA256 == "" || recs[1].Outcome != "ok" {
		t.Fatalf("records: %+v", recs)
	}
}

// TestAuditKeepsACallFromAnExecutableItCannotName: a peer whose executable's path is not
// UTF-8, or holds an invisible character, is recorded without it. Its started record was
// refused, so every call it made was refused record_failed, and its events (a session it
// opened) were not recorded at all.
func TestAuditKeepsACallFromAnExecutableItCannotName(t *testing.T) {
	a, dir := openTestAudit(t)
	s := &Server{audit: a}
	for _, exe := range []string{"/tmp/bin\xe9/airlock", "/tmp/bin\u200b/airlock"} {
		actor := audit.Actor{PID: 42, Exe: exe, Session: "s", Generation: 1}
		if _, err := a.write(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorOwner, Actor: actor,
			Target: audit.Target{Op: "fs.read", Path: "a.txt"}, Args: json.RawMessage(`{"path":"a.txt"}`)}); err != nil {
			t.Fatalf("exe %q: the started record was refused: %v", exe, err)
		}
		s.auditEvent(audit.KindEvent, audit.DoorOwner, actor, audit.Target{Op: "session.open"}, "")
	}
	recs := readJournal(t, dir)
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if r.Actor == nil || r.Actor.Exe != "" || r.Actor.PID != 42 || r.Actor.Session != "s" {
			t.Errorf("record %d: actor %+v", r.Seq, r.Actor)
		}
	}
	if recs[0].Target.Path != "a.txt" {
		t.Errorf("started: path %q, want a.txt", recs[0].Target.Path)
	}
	// Both refused: both left out.
	if _, err := a.write(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorOwner, Actor: audit.Actor{Exe: "/tmp/\xe9"},
		Target: audit.Target{Op: "fs.read", Path: "a\nb"}}); err != nil {
		t.Fatalf("exe and path refused: %v", err)
	}
}

// TestAuditLeavesOutOnlyWhatItCannotKeep: an MCP client name the journal does not keep (an
// invisible character) is left out of the record, and the call's path is kept. Both were
// left out whichever of them was refused.
func TestAuditLeavesOutOnlyWhatItCannotKeep(t *testing.T) {
	a, dir := openTestAudit(t)
	if _, err := a.write(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorMCP, Actor: audit.Actor{Session: "s", Generation: 1, MCPClient: "zw\u200bsp"},
		Target: audit.Target{Op: "fs.read", Path: "a.txt"}, Args: json.RawMessage(`{"path":"a.txt"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.write(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorMCP, Actor: audit.Actor{Session: "s", Generation: 1, MCPClient: "claude"},
		Target: audit.Target{Op: "fs.read", Path: "a\u200b.txt"}, Args: json.RawMessage(`{"path":"a\u200b.txt"}`)}); err != nil {
		t.Fatal(err)
	}
	recs := readJournal(t, dir)
	if len(recs) != 2 || recs[0].Target.Path != "a.txt" || recs[0].Actor.MCPClient != "" || recs[1].Target.Path != "" || recs[1].Actor.MCPClient != "claude" {
		t.Fatalf("records: %+v %+v / %+v %+v", recs[0].Target, recs[0].Actor, recs[1].Target, recs[1].Actor)
	}
}

// TestAuditFeedsTheMetrics: with --metrics, the journal's group commits are counted: the
// records and bytes it made durable and its fsync latency (metrics.ObserveAuditAppend).
func TestAuditFeedsTheMetrics(t *testing.T) {
	root := t.TempDir()
	d, err := Start(Config{SocketPath: filepath.Join(daemontest.ShortDir(t), "d.sock"), StateDir: filepath.Join(root, "state"),
		Audit: &AuditConfig{}, Metrics: &MetricsConfig{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	d.srv.auditEvent(audit.KindEvent, audit.DoorDaemon, audit.Actor{}, audit.Target{Op: "session.open"}, "")
	mfs, err := d.srv.prom.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				got[mf.GetName()] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	st := d.srv.audit.j.Stats()
	if got["airlock_audit_records_total"] != float64(st.Records) || got["airlock_audit_bytes_total"] != float64(st.Bytes) ||
		got["airlock_audit_fsync_duration_seconds"] < 2 {
		t.Fatalf("audit metrics %v, journal stats %+v", got, st)
	}
}
