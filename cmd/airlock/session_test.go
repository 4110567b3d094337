package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// TestSessionRoundTrip opens, shows, lists and closes a session with --json. It changes the
// working directory to check that a relative --cwd is sent absolute, so it is not parallel.
func TestSessionRoundTrip(t *testing.T) {
	d := startDaemon(t)
	dir := t.TempDir()
	t.Chdir(dir)
	abs, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	prompt := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(prompt, []byte("Be brief."), 0o600); err != nil {
		t.Fatal(err)
	}
	open := []string{"session", "open", "rt-1", "--generation", "3", "--cwd", ".", "--name", "round trip",
		"--model", "prov/model-x", "--thinking-level", "low", "--system-prompt-file", "prompt.txt", "--json"}

	r := cli(t, d.Socket, "", open...).wantCode(t, exitOK)
	var opened protocol.OpenResult
	decode(t, envelopeOf(t, r, "session open", true).Data, &opened)
	if !opened.Created || opened.Session.SessionID != "rt-1" || opened.Session.Generation != 3 ||
		opened.Session.Name != "round trip" || opened.Session.Residency != protocol.Resident {
		t.Errorf("open result %+v", opened)
	}

	// The same generation with the same policy is reused, in both output forms.
	r = cli(t, d.Socket, "", open...).wantCode(t, exitOK)
	var again protocol.OpenResult
	decode(t, envelopeOf(t, r, "session open", true).Data, &again)
	if again.Created {
		t.Errorf("second open of the same generation created it again: %+v", again)
	}
	h := cli(t, d.Socket, "", open[:len(open)-1]...).wantCode(t, exitOK)
	if !strings.HasPrefix(h.stdout, "reused\n") || !regexp.MustCompile(`(?m)^session\s+rt-1$`).MatchString(h.stdout) {
		t.Errorf("human open output:\n%s", h.stdout)
	}

	r = cli(t, d.Socket, "", "session", "show", "rt-1", "--json").wantCode(t, exitOK)
	var desc protocol.SessionDescription
	decode(t, envelopeOf(t, r, "session show", true).Data, &desc)
	rec := desc.Record
	if rec.SessionID != "rt-1" || rec.Generation != 3 || rec.Residency != protocol.Resident || desc.Snapshot == nil {
		t.Errorf("describe %+v", desc)
	}
	if rec.Policy.Cwd != abs || rec.Policy.SystemPrompt != "Be brief." || rec.Policy.Mode != protocol.ModeNew ||
		rec.Policy.Model == nil || rec.Policy.Model.Provider != "prov" || rec.Policy.Model.ID != "model-x" || rec.Policy.Model.ThinkingLevel != "low" {
		t.Errorf("policy %+v (cwd want %q)", rec.Policy, abs)
	}

	list := func() []protocol.CatalogRecord {
		t.Helper()
		r := cli(t, d.Socket, "", "session", "list", "--json").wantCode(t, exitOK)
		var page struct {
			Sessions []protocol.CatalogRecord `json:"sessions"`
		}
		decode(t, envelopeOf(t, r, "session list", true).Data, &page)
		return page.Sessions
	}
	if l := list(); len(l) != 1 || l[0].SessionID != "rt-1" || l[0].Residency != protocol.Resident {
		t.Errorf("list %+v", l)
	}

	r = cli(t, d.Socket, "", "session", "close", "rt-1", "--generation", "3", "--json").wantCode(t, exitOK)
	var closed protocol.CloseResult
	decode(t, envelopeOf(t, r, "session close", true).Data, &closed)
	if !closed.Closed || closed.Deleted {
		t.Errorf("close %+v", closed)
	}
	if l := list(); len(l) != 1 || l[0].Residency != protocol.Dormant {
		t.Errorf("list after close %+v", l)
	}
	h = cli(t, d.Socket, "", "session", "show", "rt-1").wantCode(t, exitOK)
	if !regexp.MustCompile(`(?m)^residency\s+dormant$`).MatchString(h.stdout) || strings.Contains(h.stdout, "resident:") {
		t.Errorf("show of a dormant session:\n%s", h.stdout)
	}

	r = cli(t, d.Socket, "", "session", "close", "rt-1", "--generation", "3", "--delete", "--json").wantCode(t, exitOK)
	decode(t, envelopeOf(t, r, "session close", true).Data, &closed)
	if closed.Closed || !closed.Deleted {
		t.Errorf("close --delete of a dormant session %+v", closed)
	}
	if l := list(); len(l) != 0 {
		t.Errorf("list after delete %+v", l)
	}
	r = cli(t, d.Socket, "", "session", "show", "rt-1", "--json").wantCode(t, exitFailure)
	if env := envelopeOf(t, r, "session show", false); env.Error.Code != protocol.CodeSessionNotFound {
		t.Errorf("show after delete: %+v", env.Error)
	}
	if !strings.HasPrefix(r.stderr, "airlock: "+protocol.CodeSessionNotFound+": ") {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestSessionListPages(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	const n = protocol.MaxPageSize + 5 // more than one page
	for i := range n {
		cli(t, d.Socket, "", "session", "open", "pg-"+string(rune('a'+i/26))+string(rune('a'+i%26)),
			"--generation", "1", "--cwd", t.TempDir(), "--mode", "memory").wantCode(t, exitOK)
	}
	r := cli(t, d.Socket, "", "session", "list", "--json").wantCode(t, exitOK)
	var page struct {
		Sessions []json.RawMessage `json:"sessions"`
	}
	decode(t, envelopeOf(t, r, "session list", true).Data, &page)
	if len(page.Sessions) != n {
		t.Errorf("%d sessions listed, want %d", len(page.Sessions), n)
	}

	r = cli(t, d.Socket, "", "session", "list", "--limit", "3").wantCode(t, exitOK)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^SESSION\s+GEN\s+RESIDENCY\s+STATE\s+REVISION\s+UPDATED$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^pg-aa\s+1\s+resident\s+idle\s+1\s+\S+$`).MatchString(lines[1]) {
		t.Errorf("list --limit 3:\n%s", r.stdout)
	}

	// A list --limit cut says so: on stderr, and "more" in --json. Before, a script could not
	// tell a catalog of 3 sessions from the first 3 of many.
	if want := "airlock: the catalog holds more than 3 sessions: raise --limit, or --limit 0 for all\n"; r.stderr != want {
		t.Errorf("list --limit 3: stderr %q, want %q", r.stderr, want)
	}
	more := func(args ...string) bool {
		t.Helper()
		r := cli(t, d.Socket, "", append([]string{"session", "list", "--json"}, args...)...).wantCode(t, exitOK)
		var page struct {
			Sessions []json.RawMessage `json:"sessions"`
			More     bool              `json:"more"`
		}
		decode(t, envelopeOf(t, r, "session list", true).Data, &page)
		return page.More
	}
	for _, tc := range []struct {
		limit int
		more  bool
	}{{3, true}, {protocol.MaxPageSize, true}, {n - 1, true}, {n, false}, {n + 1, false}, {0, false}} {
		if got := more("--limit", strconv.Itoa(tc.limit)); got != tc.more {
			t.Errorf("list --limit %d: more %v, want %v", tc.limit, got, tc.more)
		}
	}
	if r := cli(t, d.Socket, "", "session", "list", "--limit", strconv.Itoa(n)).wantCode(t, exitOK); r.stderr != "" {
		t.Errorf("list --limit %d of %d: stderr %q", n, n, r.stderr)
	}
}

func TestSessionStaleGeneration(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	cwd := t.TempDir()
	cli(t, d.Socket, "", "session", "open", "sg", "--generation", "2", "--cwd", cwd).wantCode(t, exitOK)

	r := cli(t, d.Socket, "", "session", "open", "sg", "--generation", "1", "--cwd", cwd).wantCode(t, exitFailure)
	if !strings.HasPrefix(r.stderr, "airlock: stale_generation: ") || r.stdout != "" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}

	r = cli(t, d.Socket, "", "session", "close", "sg", "--generation", "1", "--json").wantCode(t, exitFailure)
	env := envelopeOf(t, r, "session close", false)
	if env.Error.Code != protocol.CodeStaleGeneration || env.Error.Details["currentGeneration"] != float64(2) {
		t.Errorf("error %+v", env.Error)
	}
	if !strings.Contains(r.stderr, "stale_generation") {
		t.Errorf("stderr %q", r.stderr)
	}

	// Same generation, another policy.
	r = cli(t, d.Socket, "", "session", "open", "sg", "--generation", "2", "--cwd", cwd, "--name", "other").wantCode(t, exitFailure)
	if !strings.HasPrefix(r.stderr, "airlock: "+protocol.CodeSessionPolicyConflict+": ") {
		t.Errorf("stderr %q", r.stderr)
	}
}

// attachRun is a session attach running in the background.
type attachRun struct {
	stdout, stderr *daemontest.SyncBuffer
	cancel         context.CancelFunc
	done           chan int
}

func startAttach(t *testing.T, socket string, args ...string) *attachRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &attachRun{stdout: &daemontest.SyncBuffer{}, stderr: &daemontest.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		a.done <- run(ctx, append([]string{"--socket", socket, "session", "attach"}, args...), strings.NewReader(""), a.stdout, a.stderr)
	}()
	t.Cleanup(func() {
		cancel()
		<-a.done
	})
	return a
}

// wait returns the exit code once the attach has ended.
func (a *attachRun) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-a.done:
		a.done <- code // for the cleanup
		return code
	case <-time.After(waitTimeout):
		t.Fatal("attach did not end")
		return 0
	}
}

func TestSessionAttach(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	cli(t, d.Socket, "", "session", "open", "at", "--generation", "5", "--cwd", t.TempDir()).wantCode(t, exitOK)

	a := startAttach(t, d.Socket, "at", "--generation", "5")
	waitFor(t, "the attach result", func() bool { return strings.Contains(a.stderr.String(), "attached at generation=5") })

	cli(t, d.Socket, "", "session", "close", "at", "--generation", "5").wantCode(t, exitOK)
	waitFor(t, "the sessionClosed event", func() bool { return strings.Contains(a.stdout.String(), "\n") })
	a.cancel()
	if code := a.wait(t); code != exitOK {
		t.Fatalf("attach exit %d after interrupt; stderr %q", code, a.stderr.String())
	}

	lines := strings.Split(strings.TrimSuffix(a.stdout.String(), "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("attach printed %d lines, want the one event:\n%s", len(lines), a.stdout.String())
	}
	var ev struct {
		Kind       string                     `json:"kind"`
		Event      string                     `json:"event"`
		SessionID  string                     `json:"sessionId"`
		Generation int64                      `json:"generation"`
		Data       protocol.SessionClosedData `json:"data"`
	}
	decode(t, []byte(lines[0]), &ev)
	if ev.Kind != protocol.KindEvent || ev.Event != protocol.EventSessionClosed || ev.SessionID != "at" || ev.Generation != 5 ||
		ev.Data.Reason != "closed" || !ev.Data.RetainSession {
		t.Errorf("event %s", lines[0])
	}
}

func TestSessionAttachDaemonGone(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	cli(t, d.Socket, "", "session", "open", "gone", "--generation", "1", "--cwd", t.TempDir()).wantCode(t, exitOK)
	a := startAttach(t, d.Socket, "gone", "--generation", "1")
	waitFor(t, "the attach result", func() bool { return strings.Contains(a.stderr.String(), "attached gone") })

	d.Stop()
	if code := a.wait(t); code != exitFailure {
		t.Fatalf("attach exit %d when the daemon stopped, want %d; stderr %q", code, exitFailure, a.stderr.String())
	}
	if !strings.Contains(a.stderr.String(), "airlock: transport: the daemon closed the connection") {
		t.Errorf("stderr %q", a.stderr.String())
	}
	// The daemon said goodbye before closing.
	if !strings.Contains(a.stdout.String(), `"event":"sessionClosed"`) {
		t.Errorf("stdout %q", a.stdout.String())
	}
}

func TestSessionAttachRefused(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	r := cli(t, d.Socket, "", "session", "attach", "nobody", "--generation", "1").wantCode(t, exitFailure)
	if !strings.HasPrefix(r.stderr, "airlock: "+protocol.CodeSessionNotFound+": ") {
		t.Errorf("stderr %q", r.stderr)
	}
}
