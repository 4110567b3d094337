package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// journalRecords reads every effect, decision and event record of a daemon's journal.
func journalRecords(t *testing.T, stateDir string) []audit.Record {
	t.Helper()
	var out []audit.Record
	if err := audit.Read(context.Background(), audit.DirIn(stateDir), audit.Query{}, false, func(_ []byte, r *audit.Record) error {
		out = append(out, *r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBinaryAuditKill9KeepsEveryAcknowledgedCall: 16 clients write files through a real
// airlockd and its airlock-fs as fast as they can; once 200 writes were acknowledged the
// daemon is killed with SIGKILL mid-burst. Every acknowledged write is in the journal, its
// started record and its ok outcome, and no write is recorded twice; the journal verifies;
// the daemon starts again on it (cutting a torn tail, if any) and records on. So with either
// --audit-sync: both write every record before the answer leaves.
func TestBinaryAuditKill9KeepsEveryAcknowledgedCall(t *testing.T) {
	for _, mode := range []string{"answer", "interval"} {
		t.Run(mode, func(t *testing.T) { auditKill9(t, mode) })
	}
}

func auditKill9(t *testing.T, mode string) {
	syncFlag := "--audit-sync=" + mode
	e := startManaged(t, daemontest.Options{Args: []string{syncFlag}})
	if !strings.Contains(e.d.Stderr(), "sync="+mode) {
		t.Fatalf("the journal is not opened with sync %s:\n%s", mode, e.d.Stderr())
	}
	if r := call(t, e.c, managedOpen("burst", 1, e.root, "fs.write")); !r.OK {
		t.Fatalf("open: %+v", r.Error)
	}
	const clients, killAfter = 16, 200
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		kill  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for i := range clients {
		c := e.d.Dial()
		wg.Go(func() {
			for n := 0; ; n++ {
				path := fmt.Sprintf("c%02d-%05d.txt", i, n)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := c.Call(ctx, client.Command{Operation: "invokeTool", SessionID: "burst", Generation: gen(1),
					Payload: map[string]any{"toolCallId": path, "operation": "fs.write",
						"arguments": map[string]any{"path": path, "content": "x", "create": true}}})
				cancel()
				if err != nil {
					return // the daemon is gone
				}
				if !r.OK {
					t.Errorf("write %s: %+v", path, r.Error)
					return
				}
				mu.Lock()
				acked[path] = true
				if len(acked) == killAfter {
					close(kill)
				}
				mu.Unlock()
			}
		})
	}
	<-kill
	e.d.Kill9()
	wg.Wait()

	started, outcomes := map[string]int{}, map[string]int{}
	bySeq := map[uint64]string{}
	for _, r := range journalRecords(t, e.d.StateDir) {
		switch {
		case r.Kind == audit.KindStarted && r.Target.Op == "fs.write":
			started[r.Target.Path]++
			bySeq[r.Seq] = r.Target.Path
		case r.Kind == audit.KindOutcome && r.Target.Op == "fs.write":
			if bySeq[r.Ref] != r.Target.Path {
				t.Errorf("outcome seq %d refers to %d, the start of %q, not %q", r.Seq, r.Ref, bySeq[r.Ref], r.Target.Path)
			}
			if r.Outcome != "ok" {
				t.Errorf("outcome of %s: %s", r.Target.Path, r.Outcome)
			}
			outcomes[r.Target.Path]++
		}
	}
	mu.Lock()
	n := len(acked)
	for path := range acked {
		if started[path] != 1 || outcomes[path] != 1 {
			t.Errorf("acknowledged write %s: %d started and %d outcome records, want 1 and 1", path, started[path], outcomes[path])
		}
	}
	mu.Unlock()
	for path, k := range started {
		if k > 1 || outcomes[path] > 1 {
			t.Errorf("write %s recorded %d times, its outcome %d times", path, k, outcomes[path])
		}
	}
	t.Logf("%d writes acknowledged before SIGKILL, %d started in the journal", n, len(started))
	if rep, err := audit.Verify(audit.DirIn(e.d.StateDir), nil); err != nil || !rep.OK() {
		t.Fatalf("verify after SIGKILL: %v %+v", err, rep.Break)
	}

	// The daemon starts again on the journal and appends to the same chain.
	d2 := daemontest.Start(t, daemontest.Options{Socket: e.d.Socket, StateDir: e.d.StateDir, Args: []string{syncFlag}})
	c2 := d2.Dial()
	if r := call(t, c2, managedOpen("after", 1, e.root, "fs.write")); !r.OK {
		t.Fatalf("open after the restart: %+v", r.Error)
	}
	if r := call(t, c2, client.Command{Operation: "invokeTool", SessionID: "after", Generation: gen(1),
		Payload: map[string]any{"toolCallId": "after", "operation": "fs.write", "arguments": map[string]any{"path": "after.txt", "content": "x", "create": true}}}); !r.OK {
		t.Fatalf("write after the restart: %+v", r.Error)
	}
	rep, err := audit.Verify(audit.DirIn(e.d.StateDir), nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify after the restart: %v %+v", err, rep.Break)
	}
	found := false
	for _, r := range journalRecords(t, e.d.StateDir) {
		found = found || r.Kind == audit.KindOutcome && r.Target.Path == "after.txt"
	}
	if !found {
		t.Fatal("the write after the restart is not in the journal")
	}
}

// TestBinaryAuditBrokenChainFailsStart: airlockd exports the chain head at shutdown, to its
// log and to --audit-head-file; a record of the journal edited while airlockd was down (one
// byte) fails the next start with audit_chain_broken, naming the journal and
// what to run; airlockd --audit=false starts on the same state without reading it.
// TestBinaryAuditHeadFileWrittenAtStart: --audit-head-file receives the head when the
// journal opens, and a file that cannot be written refuses the start. It was first written 5
// minutes later or at shutdown, so a wrong path went unseen but for a warning in the log.
func TestBinaryAuditHeadFileWrittenAtStart(t *testing.T) {
	headFile := filepath.Join(t.TempDir(), "head.json")
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--audit-head-file", headFile}})
	var head audit.Head
	if b, err := os.ReadFile(headFile); err != nil || json.Unmarshal(b, &head) != nil || head.Seq == 0 {
		t.Fatalf("head file after start: %+v (%v)", head, err)
	}
	if !strings.Contains(d.Stderr(), "head="+head.String()) {
		t.Fatalf("the head file holds %s, not the head the log names", head)
	}
	d.Stop()

	missing := filepath.Join(t.TempDir(), "no-such-dir", "head.json")
	d2 := daemontest.Start(t, daemontest.Options{Args: []string{"--audit-head-file", missing}, NoWait: true})
	if code, err := d2.ExitCode(20 * time.Second); err != nil || code == 0 {
		t.Fatalf("start with an unwritable head file: exit %d, %v", code, err)
	}
	if s := d2.Stderr(); !strings.Contains(s, audit.CodeWriteFailed) || !strings.Contains(s, missing) {
		t.Fatalf("stderr does not name the head file:\n%s", s)
	}
}

func TestBinaryAuditBrokenChainFailsStart(t *testing.T) {
	headFile := filepath.Join(t.TempDir(), "head.json")
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--audit-head-file", headFile}})
	c := d.Dial()
	for _, id := range []string{"a", "b", "c"} {
		if r := call(t, c, client.Command{Operation: "open", SessionID: id, Generation: gen(1), Payload: openPayload(t.TempDir())}); !r.OK {
			t.Fatalf("open %s: %+v", id, r.Error)
		}
	}
	d.Stop()
	// The head exported at shutdown is the journal's.
	rep, err := audit.Verify(audit.DirIn(d.StateDir), nil)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Break)
	}
	var head audit.Head
	if b, err := os.ReadFile(headFile); err != nil || json.Unmarshal(b, &head) != nil || head.String() != rep.Head.String() {
		t.Fatalf("exported head %+v (%v), the journal's %s", head, err, rep.Head)
	}
	if !strings.Contains(d.Stderr(), "audit head") || !strings.Contains(d.Stderr(), rep.Head.String()) {
		t.Fatalf("the log does not export the head %s", rep.Head)
	}
	seg := filepath.Join(audit.DirIn(d.StateDir), "seg-0000000000000001.ndjson")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), `"session":"b"`)
	if i < 0 {
		t.Fatalf("no record of session b in %s", b)
	}
	b[i+len(`"session":"`)] = 'x'
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}

	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, NoWait: true})
	if code, err := d2.ExitCode(20 * time.Second); err != nil || code == 0 {
		t.Fatalf("start on a broken journal: exit %d, %v", code, err)
	}
	if s := d2.Stderr(); !strings.Contains(s, audit.CodeChainBroken) || !strings.Contains(s, "airlock audit verify") {
		t.Fatalf("stderr does not name the broken chain:\n%s", s)
	}
	daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir, Args: []string{"--audit=false"}})
}
