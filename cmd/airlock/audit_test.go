package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
)

// auditJournal writes a journal like the gate's: n fs.writes of session s-1 (started and
// outcome), one of s-2, and an approval decided on the page in room home.
func auditJournal(t *testing.T, opt audit.Options, n int) (string, *audit.Journal) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state", "audit")
	j, _, err := audit.Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	appendWrite := func(session, path string) {
		a := audit.Actor{PID: 7, Exe: "/usr/bin/airlock", Session: session, Generation: 2}
		tg := audit.Target{Op: "fs.write", Path: path}
		s, err := j.Append(audit.Entry{Kind: audit.KindStarted, Door: audit.DoorOwner, Actor: a, Target: tg, Args: json.RawMessage(`{"path":"` + path + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Append(audit.Entry{Kind: audit.KindOutcome, Ref: s.Seq, Door: audit.DoorOwner, Actor: a, Target: tg, Outcome: "ok", Duration: 2 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		appendWrite("s-1", fmt.Sprint("notes/", i, ".txt"))
	}
	appendWrite("s-2", "other.txt")
	if _, err := j.Append(audit.Entry{Kind: audit.KindDecision, Door: audit.DoorWeb, Actor: audit.Actor{Room: "home", Host: "h-b"},
		Target: audit.Target{Op: "approval.decided", Capability: "lamp", Action: "switch"}, Outcome: "approved"}); err != nil {
		t.Fatal(err)
	}
	return dir, j
}

func TestAuditPrintsTheJournal(t *testing.T) {
	t.Parallel()
	dir, _ := auditJournal(t, audit.Options{}, 2)
	r := cli(t, "/nonexistent.sock", "", "audit", "--dir", dir, "--json").wantCode(t, exitOK)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7:\n%s", len(lines), r.stdout)
	}
	var st audit.Record
	decode(t, []byte(lines[0]), &st)
	if st.Kind != audit.KindStarted || st.Door != audit.DoorOwner || st.Actor.Session != "s-1" || st.Actor.Generation != 2 ||
		st.Actor.PID != 7 || st.Target.Op != "fs.write" || st.Target.Path != "notes/0.txt" || len(st.ArgsSHA256) != 64 || st.Prev == "" {
		t.Fatalf("first record %s", lines[0])
	}
	// Each line is the journal's own bytes: its digest is the next record's prev.
	var next audit.Record
	decode(t, []byte(lines[1]), &next)
	if next.Prev != audit.Digest([]byte(lines[0])) || next.Ref != st.Seq || next.Outcome != "ok" || next.DurationUS != 2000 {
		t.Fatalf("second record %s", lines[1])
	}
	for args, want := range map[string]int{
		"--session s-2":      2,
		"--room home":        1,
		"--door web":         1,
		"--since 1h":         7,
		"--since 2999-01-01": 0,
		"--marks":            8,
	} {
		r := cli(t, "/nonexistent.sock", "", append([]string{"audit", "--dir", dir, "--json"}, strings.Fields(args)...)...).wantCode(t, exitOK)
		if got := strings.Count(r.stdout, "\n"); got != want {
			t.Errorf("%s: %d records, want %d:\n%s", args, got, want, r.stdout)
		}
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "--dir", dir, "--room", "home").wantCode(t, exitOK)
	if !strings.HasPrefix(r.stdout, "TIME") || !strings.Contains(r.stdout, "home@h-b") || !strings.Contains(r.stdout, "lamp switch") || !strings.Contains(r.stdout, "approved") {
		t.Fatalf("table:\n%s", r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "--dir", dir, "--session", "s-1").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "s-1/2") || !strings.Contains(r.stdout, "notes/1.txt") || !strings.Contains(r.stdout, "ok (of ") || strings.Count(r.stdout, "\n") != 5 {
		t.Fatalf("table:\n%s", r.stdout)
	}
}

func TestAuditVerifyAndHead(t *testing.T) {
	t.Parallel()
	dir, j := auditJournal(t, audit.Options{MaxSegmentBytes: 2048}, 20)
	head := j.Head().String()
	j.Close()
	r := cli(t, "/nonexistent.sock", "", "audit", "head", "--dir", dir).wantCode(t, exitOK)
	if strings.TrimSpace(r.stdout) != head {
		t.Fatalf("audit head %q, want %q", r.stdout, head)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--head", head).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "chain") || !strings.Contains(r.stdout, "intact") || !strings.Contains(r.stdout, "holds") {
		t.Fatalf("verify:\n%s", r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--json").wantCode(t, exitOK)
	var ok struct {
		OK       bool `json:"ok"`
		Segments int  `json:"segments"`
	}
	decode(t, envelopeOf(t, r, "audit verify", true).Data, &ok)
	if !ok.OK || ok.Segments < 3 {
		t.Fatalf("verify --json: %s", r.stdout)
	}

	// Cut the newest two records: only the exported head shows it.
	nums, _ := filepath.Glob(filepath.Join(dir, "seg-*.ndjson"))
	newest := nums[len(nums)-1]
	b, _ := os.ReadFile(newest)
	ls := bytes.SplitAfter(b, []byte("\n"))
	if err := os.WriteFile(newest, bytes.Join(ls[:len(ls)-3], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir).wantCode(t, exitOK)
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--head", head).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "airlock: audit_chain_broken:") || !strings.Contains(r.stderr, "before the exported head") {
		t.Fatalf("stderr: %s", r.stderr)
	}

	// Swap two records of the oldest segment.
	b, _ = os.ReadFile(nums[0])
	ls = bytes.SplitAfter(b, []byte("\n"))
	ls[2], ls[3] = ls[3], ls[2]
	if err := os.WriteFile(nums[0], bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--json").wantCode(t, exitFailure)
	env := envelopeOf(t, r, "audit verify", false)
	var bad struct {
		OK    bool         `json:"ok"`
		Break *audit.Break `json:"break"`
	}
	decode(t, env.Data, &bad)
	if env.Error.Code != audit.CodeChainBroken || bad.OK || bad.Break == nil || bad.Break.Segment != filepath.Base(nums[0]) || bad.Break.Seq != 4 {
		t.Fatalf("verify of a swapped pair: %s", r.stdout)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir).wantCode(t, exitFailure)
	if !strings.Contains(r.stdout, "BROKEN") {
		t.Fatalf("verify:\n%s", r.stdout)
	}
}

func TestAuditUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"audit", "--dir", dir, "--door", "pipe"},
		{"audit", "--dir", dir, "--since", "soon"},
		{"audit", "--dir", dir, "extra"},
		{"audit", "verify", "--dir", dir, "--head", "12"},
	} {
		r := cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitUsage)
		if !strings.HasPrefix(r.stderr, "airlock: usage:") {
			t.Errorf("%v: stderr %s", args, r.stderr)
		}
	}
	// A directory that holds a non-record where a record must be.
	bad := filepath.Join(t.TempDir(), "audit")
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bad, "seg-0000000000000001.ndjson"), []byte("not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "/nonexistent.sock", "", "audit", "--dir", bad).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "audit_corrupt") {
		t.Fatalf("stderr %s", r.stderr)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "head", "--dir", bad).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "audit_chain_broken") {
		t.Fatalf("stderr %s", r.stderr)
	}
}

// TestAuditSaysWhyItCannotRead: what stops an audit command is printed with its cause and
// code. The commands printed "audit_corrupt: cannot verify DIR" for a segment another user
// could read (which a chmod fixes) and for a directory that does not exist alike.
func TestAuditSaysWhyItCannotRead(t *testing.T) {
	t.Parallel()
	dir, j := auditJournal(t, audit.Options{}, 1)
	j.Close()
	seg := filepath.Join(dir, "seg-0000000000000001.ndjson")
	if err := os.Chmod(seg, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"audit"}, {"audit", "verify"}, {"audit", "head"}} {
		r := cli(t, "/nonexistent.sock", "", append(args, "--dir", dir)...).wantCode(t, exitFailure)
		if !strings.HasPrefix(r.stderr, "airlock: insecure_state_path: "+seg+" has mode 0644") {
			t.Errorf("%v: stderr %s", args, r.stderr)
		}
	}
	// A directory that does not exist (a machine where airlockd never ran): says so, and
	// prints nothing else (no table header before the error).
	missing := filepath.Join(t.TempDir(), "nothing")
	for _, args := range [][]string{{"audit"}, {"audit", "verify"}, {"audit", "head"}} {
		r := cli(t, "/nonexistent.sock", "", append(args, "--dir", missing)...).wantCode(t, exitFailure)
		if !strings.HasPrefix(r.stderr, "airlock: audit_corrupt: no audit journal at "+missing+": airlockd writes one from its first start") || r.stdout != "" {
			t.Errorf("%v: stdout %q stderr %s", args, r.stdout, r.stderr)
		}
	}
}

// TestAuditRefusesADirectoryWithoutJournal: a directory with no segment is no journal (the
// daemon writes one at its first start). audit verify called it an intact chain of 0 records,
// exit 0, and audit printed nothing: an operator who named the state directory rather than its
// audit/, or whose segments were all deleted, was told all was well.
func TestAuditRefusesADirectoryWithoutJournal(t *testing.T) {
	t.Parallel()
	dir, j := auditJournal(t, audit.Options{}, 1)
	head := j.Head().String()
	j.Close()
	state := filepath.Dir(dir)
	for _, args := range [][]string{{"audit"}, {"audit", "verify"}, {"audit", "verify", "--head", head}, {"audit", "head"}} {
		r := cli(t, "/nonexistent.sock", "", append(args, "--dir", state)...).wantCode(t, exitFailure)
		if !strings.HasPrefix(r.stderr, "airlock: audit_corrupt: "+state+" holds no audit journal") || !strings.Contains(r.stderr, "its journal is "+dir) {
			t.Errorf("%v of the state directory: stderr %s", args, r.stderr)
		}
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "seg-*"))
	for _, s := range segs {
		if err := os.Remove(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"audit"}, {"audit", "verify"}, {"audit", "head"}} {
		r := cli(t, "/nonexistent.sock", "", append(args, "--dir", dir, "--json")...).wantCode(t, exitFailure)
		if !strings.HasPrefix(r.stderr, "airlock: audit_corrupt: "+dir+" holds no audit journal") {
			t.Errorf("%v of a journal without segments: stderr %s", args, r.stderr)
		}
	}
}

// TestAuditJSONKeys pins the members of audit head --json and audit verify --json that
// docs/operations.md lists ("--json"): scripts read them.
func TestAuditJSONKeys(t *testing.T) {
	t.Parallel()
	keys := func(raw json.RawMessage) string {
		var m map[string]json.RawMessage
		decode(t, raw, &m)
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return strings.Join(ks, " ")
	}
	dir, j := auditJournal(t, audit.Options{}, 3)
	head := j.Head().String()
	j.Close()
	r := cli(t, "/nonexistent.sock", "", "audit", "head", "--dir", dir, "--json").wantCode(t, exitOK)
	if got := keys(envelopeOf(t, r, "audit head", true).Data); got != "digest segment seq time" {
		t.Errorf("audit head data: %s", got)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--json").wantCode(t, exitOK)
	if got := keys(envelopeOf(t, r, "audit verify", true).Data); got != "dir firstSeq head lastSeq ok records segments unanchored" {
		t.Errorf("audit verify data: %s", got)
	}
	seg := filepath.Join(dir, "seg-0000000000000001.ndjson")
	b, _ := os.ReadFile(seg)
	ls := bytes.SplitAfter(b, []byte("\n"))
	ls[2], ls[3] = ls[3], ls[2]
	if err := os.WriteFile(seg, append(bytes.Join(ls, nil), "{torn"...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "/nonexistent.sock", "", "audit", "verify", "--dir", dir, "--head", head, "--json").wantCode(t, exitFailure)
	var data struct{ Anchor, Break json.RawMessage }
	env := envelopeOf(t, r, "audit verify", false)
	decode(t, env.Data, &data)
	if got := keys(env.Data); got != "anchor break dir firstSeq head lastSeq ok records segments unanchored" {
		t.Errorf("audit verify data of a broken journal: %s", got)
	}
	if got := keys(data.Anchor); got != "checked digest holds seq" {
		t.Errorf("anchor: %s", got)
	}
	if got := keys(data.Break); got != "offset reason segment seq" {
		t.Errorf("break: %s", got)
	}
}

func TestAuditFollowAcrossRotation(t *testing.T) {
	t.Parallel()
	dir, j := auditJournal(t, audit.Options{MaxSegmentBytes: 1024}, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"audit", "--dir", dir, "--follow", "--json", "--session", "f"}, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	for i := range 12 {
		path := fmt.Sprint("p", i)
		if _, err := j.Append(audit.Entry{Kind: audit.KindEvent, Door: audit.DoorOwner, Actor: audit.Actor{Session: "f"}, Target: audit.Target{Op: "session.open", Path: path}}); err != nil {
			t.Fatal(err)
		}
		select {
		case l := <-lines:
			var r audit.Record
			decode(t, []byte(l), &r)
			if r.Target.Path != path {
				t.Fatalf("followed %s, want %s", l, path)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("follow printed nothing for %s", path)
		}
	}
	if nums, _ := filepath.Glob(filepath.Join(dir, "seg-*")); len(nums) < 3 {
		t.Fatalf("%d segments: the test needs rotation", len(nums))
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("follow ended with %d", code)
	}
	for range lines {
	}
}
