package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/store"
)

// turnHost is a Manager with a scripted model behind provider "local".
type turnHost struct {
	m   *Manager
	st  *store.Store
	llm *modeltest.Server
	dir string
}

func newTurnHost(t *testing.T) *turnHost {
	t.Helper()
	llm := modeltest.New()
	t.Cleanup(llm.Close)
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	h := &turnHost{llm: llm, dir: dir}
	h.start(t)
	return h
}

// start opens the store and a Manager on h.dir and recovers; the previous one, if any, must
// have been stopped.
func (h *turnHost) start(t *testing.T) {
	t.Helper()
	h.startWith(t, Config{})
}

// startWith is start with cfg's recovery deadlines and logger.
func (h *turnHost) startWith(t *testing.T, cfg Config) {
	t.Helper()
	st, err := store.Open(h.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{HostInstanceID: "host-test", Store: st,
		Providers:           map[string]Provider{"local": {Name: "local", BaseURL: h.llm.URL()}},
		RecoveryOpenTimeout: cfg.RecoveryOpenTimeout, RecoveryTimeout: cfg.RecoveryTimeout, Logger: cfg.Logger})
	if err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	h.m, h.st = m, st
	t.Cleanup(h.stop)
}

func (h *turnHost) stop() {
	h.m.Shutdown()
	h.st.Close()
}

func (h *turnHost) open(t *testing.T, id, mode string) {
	t.Helper()
	h.openPolicy(t, id, turnPolicy(t, mode))
}

// turnPolicy is a policy with the scripted model and a fresh cwd.
func turnPolicy(t *testing.T, mode string) *protocol.Policy {
	return &protocol.Policy{Cwd: t.TempDir(), Mode: mode, Tools: protocol.ResourceNone,
		Model: &protocol.ModelRef{Provider: "local", ID: "m"}}
}

// openPolicy opens generation 1 of id with p.
func (h *turnHost) openPolicy(t *testing.T, id string, p *protocol.Policy) {
	t.Helper()
	if _, err := h.m.Open(context.Background(), OpenRequest{SessionID: id, Generation: 1, Version: v1(), Policy: p}); err != nil {
		t.Fatal(err)
	}
}

func (h *turnHost) wake(id, key, prompt string, wait bool) (any, error) {
	return h.m.Wake(context.Background(), WakeRequest{SessionID: id, Generation: 1, IdempotencyKey: key, RequestID: "r-" + key,
		Payload: &protocol.WakePayload{Prompt: prompt, WaitForTerminal: &wait}})
}

func resultText(t *testing.T, v any) string {
	t.Helper()
	w, ok := v.(*protocol.WakeResult)
	if !ok {
		t.Fatalf("not a wake result: %T", v)
	}
	var r protocol.TurnResult
	if err := json.Unmarshal(w.Result, &r); err != nil {
		t.Fatal(err)
	}
	return r.Text
}

// TestWakeDedupTable walks the duplicate rules: a live duplicate joins, another payload
// conflicts, a terminal duplicate gets the recorded outcome without a model call.
func TestWakeDedupTable(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	h.llm.Push(modeltest.Reply{Text: "answer", Hold: hold})

	var wg sync.WaitGroup
	texts := make([]string, 3)
	for i := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := h.wake("s", "k", "question", true)
			if err != nil {
				t.Error(err)
				return
			}
			texts[i] = resultText(t, v)
		}()
	}
	<-h.llm.Arrived(1)
	// The joined callers wait on the one wake; wait until all three are in.
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.m.mu.Lock()
		joins := h.m.metrics["wakeDedupJoins"]
		h.m.mu.Unlock()
		if joins == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("joins %d", joins)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := h.wake("s", "k", "another question", true); code(err) != protocol.CodeIdempotencyConflict {
		t.Fatalf("live conflict: %v", err)
	}
	close(hold)
	wg.Wait()
	for _, txt := range texts {
		if txt != "answer" {
			t.Fatalf("joined results %q", texts)
		}
	}
	v, err := h.wake("s", "k", "question", true)
	if err != nil || resultText(t, v) != "answer" {
		t.Fatalf("terminal duplicate: %v", err)
	}
	if v, err := h.wake("s", "k", "question", false); err != nil || v.(*protocol.TicketResult).Ticket.State != protocol.TicketSucceeded {
		t.Fatalf("terminal duplicate ticket: %v %+v", err, v)
	}
	if _, err := h.wake("s", "k", "another question", true); code(err) != protocol.CodeIdempotencyConflict {
		t.Fatalf("terminal conflict: %v", err)
	}
	if h.llm.Count() != 1 {
		t.Fatalf("%d model calls", h.llm.Count())
	}
}

// TestCompletionNotRecorded: a turn that ends when its terminal record cannot be written fails
// durability_completion_failed, stays accepted (a duplicate is request_indeterminate), and the
// next start makes it indeterminate.
func TestCompletionNotRecorded(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	h.llm.Push(modeltest.Reply{Text: "done", Hold: hold})
	errc := make(chan error, 1)
	go func() {
		_, err := h.wake("s", "k", "question", true)
		errc <- err
	}()
	<-h.llm.Arrived(1)
	h.st.Close() // every later write fails
	close(hold)
	if err := <-errc; code(err) != protocol.CodeDurabilityCompletion {
		t.Fatalf("wake: %v", err)
	}
	if _, err := h.wake("s", "k", "question", true); code(err) != protocol.CodeRequestIndeterminate {
		t.Fatalf("duplicate: %v", err)
	}
	// Indeterminate already, as its ticket says, not only after a restart: the host is not
	// ready, and a reconcile tries to record the verdict (which the closed store refuses)
	// rather than answering that the indeterminate ticket is not indeterminate.
	if h.m.Ready() {
		t.Fatal("ready with an indeterminate wake, before the restart")
	}
	if r, err := h.m.Ticket(protocol.TicketID("s", "k")); err != nil || r.Ticket.State != protocol.TicketIndeterminate {
		t.Fatalf("ticket before the restart: %v %+v", err, r)
	}
	if _, err := h.m.Reconcile(protocol.TicketID("s", "k"), protocol.OutcomeSucceeded); code(err) == protocol.CodeTicketNotIndeterminate {
		t.Fatalf("reconcile before the restart: %v", err)
	}
	h.m.Shutdown()
	h.start(t)
	if h.m.Ready() {
		t.Fatal("ready with an indeterminate wake")
	}
	r, err := h.m.Ticket(protocol.TicketID("s", "k"))
	if err != nil || r.Ticket.State != protocol.TicketIndeterminate {
		t.Fatalf("ticket: %v %+v", err, r)
	}
}

// TestLongAnswerIsRecordedNotIndeterminate: a model's answer too long for the wake's journal
// entry (1.5 MB, well within the model client's and the transcript's limits) failed the wake
// durability_completion_failed and left it accepted, so the restart after made it
// indeterminate and the host degraded until an operator reconciled it. A model cannot be
// allowed to do that by answering at length: the wake is recorded failed
// journal_record_too_large, a retry gets that outcome, the generation goes on, and a restart
// finds the host ready.
func TestLongAnswerIsRecordedNotIndeterminate(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	h.llm.Push(modeltest.Reply{Text: strings.Repeat("a", 1500<<10), Chunk: 64 << 10})
	_, err := h.wake("s", "k", "say a lot", true)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeJournalRecordTooLarge || pe.Details["ticketId"] != protocol.TicketID("s", "k") {
		t.Fatalf("wake: %v", err)
	}
	if _, err := h.wake("s", "k", "say a lot", true); code(err) != protocol.CodeJournalRecordTooLarge {
		t.Fatalf("duplicate: %v", err)
	}
	h.llm.Push(modeltest.Reply{Text: "short"})
	if v, err := h.wake("s", "k2", "and now briefly", true); err != nil || resultText(t, v) != "short" {
		t.Fatalf("next wake: %v %v", v, err)
	}
	h.m.Shutdown()
	h.st.Close()
	h.start(t)
	if !h.m.Ready() {
		t.Fatal("not ready after a restart")
	}
	r, err := h.m.Ticket(protocol.TicketID("s", "k"))
	if err != nil || r.Ticket.State != protocol.TicketFailed || r.Ticket.Error == nil || r.Ticket.Error.Code != protocol.CodeJournalRecordTooLarge {
		t.Fatalf("ticket: %v %+v", err, r)
	}
}

// TestCrashAfterCloseKeepsHostReady: a close records the session dormant, then fails its
// queued wakes in the background, one journal write each. A crash in between (an operator
// closed a busy session, and the daemon died a moment later) left them queued, and the next
// start failed them restore_wake_failed, counting each as a recovery failure: the host came
// back degraded for a session nobody wanted restored. They fail aborted, as the close failed
// them, and the host is ready.
func TestCrashAfterCloseKeepsHostReady(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	h.llm.Push(modeltest.Reply{Hold: hold})
	for _, k := range []string{"k1", "k2", "k3"} {
		if _, err := h.wake("s", k, "p-"+k, false); err != nil {
			t.Fatal(err)
		}
	}
	<-h.llm.Arrived(1)
	// What a crash leaves: the first write of the close, the record made dormant, and the
	// queued wakes still queued (a shutdown leaves them so; the running one ends aborted).
	h.m.Shutdown()
	rec, err := h.st.Record("s")
	if err != nil {
		t.Fatal(err)
	}
	rec.Residency, rec.State = protocol.Dormant, protocol.StateIdle
	if err := h.st.SaveSession(rec, nil); err != nil {
		t.Fatal(err)
	}
	h.st.Close()
	close(hold)

	h.start(t)
	if !h.m.Ready() {
		t.Fatal("not ready after a restart that found a closed session's queued wakes")
	}
	for _, k := range []string{"k2", "k3"} {
		r, err := h.m.Ticket(protocol.TicketID("s", k))
		if err != nil || r.Ticket.State != protocol.TicketFailed || r.Ticket.Error == nil ||
			r.Ticket.Error.Code != protocol.CodeAborted || !r.Ticket.Error.Retryable {
			t.Fatalf("ticket %s: %v %+v", k, err, r)
		}
	}
	if n := h.llm.Count(); n != 1 {
		t.Fatalf("the model was called %d times; a closed session's wake ran after the restart", n)
	}
}

// TestIndeterminateWakeLogged: the start that finds a wake indeterminate logs its ticket, which
// host.recovery only counts: an operator whose client is gone had no way to learn what to
// reconcile.
func TestIndeterminateWakeLogged(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	h.llm.Push(modeltest.Reply{Text: "done", Hold: hold})
	errc := make(chan error, 1)
	go func() {
		_, err := h.wake("s", "k", "question", true)
		errc <- err
	}()
	<-h.llm.Arrived(1)
	h.st.Close() // the outcome cannot be recorded: the wake stays accepted
	close(hold)
	if err := <-errc; code(err) != protocol.CodeDurabilityCompletion {
		t.Fatalf("wake: %v", err)
	}
	h.m.Shutdown()
	var logs syncBuffer
	h.startWith(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	want := "ticketId=" + protocol.TicketID("s", "k")
	if out := logs.String(); !strings.Contains(out, "wake indeterminate") || !strings.Contains(out, want) ||
		!strings.Contains(out, "requestId=r-k") {
		t.Fatalf("log does not name the indeterminate ticket (%s):\n%s", want, out)
	}
}

// TestRestartRevisions pins what docs/protocol.md ("Storage and restart") says a restart does to
// the catalog: a restored session's record is left as it was, a memory session's is marked
// dormant with revision + 1.
func TestRestartRevisions(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "kept", protocol.ModeNew)
	h.open(t, "mem", protocol.ModeMemory)
	h.m.Shutdown()
	h.st.Close()
	h.start(t)
	for _, tc := range []struct {
		id        string
		revision  uint64
		residency string
	}{{"kept", 1, protocol.Resident}, {"mem", 2, protocol.Dormant}} {
		rec, err := h.st.Record(tc.id)
		if err != nil || rec.Revision != tc.revision || rec.Residency != tc.residency {
			t.Errorf("%s after a restart: %v %+v", tc.id, err, rec)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestJournalRetention prunes the oldest terminal entries beyond the per-session bound.
func TestJournalRetention(t *testing.T) {
	defer func(n int) { maxTerminalEntries = n }(maxTerminalEntries)
	maxTerminalEntries = 3
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	for _, k := range keys {
		h.llm.Push(modeltest.Reply{Text: k})
		if _, err := h.wake("s", k, "q "+k, true); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range keys {
		_, err := h.m.Ticket(protocol.TicketID("s", k))
		if gone := i < 2; gone != (code(err) == protocol.CodeTicketNotFound) {
			t.Fatalf("%s: %v", k, err)
		}
	}
	entries, err := h.st.RecoverJournal()
	if err != nil || len(entries) != 3 {
		t.Fatalf("journal holds %d entries: %v", len(entries), err)
	}
}

// TestMemorySessionWakes: a memory session runs turns and answers duplicates from memory, but
// journals nothing.
func TestMemorySessionWakes(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "mem", protocol.ModeMemory)
	h.llm.Push(modeltest.Reply{Text: "hi"})
	v, err := h.wake("mem", "k", "hello", true)
	if err != nil || resultText(t, v) != "hi" {
		t.Fatalf("wake: %v", err)
	}
	if v, err = h.wake("mem", "k", "hello", true); err != nil || resultText(t, v) != "hi" {
		t.Fatalf("duplicate: %v", err)
	}
	entries, err := h.st.RecoverJournal()
	if err != nil || len(entries) != 0 {
		t.Fatalf("memory session journaled %d entries: %v", len(entries), err)
	}
}

// TestRecoveryFailures provokes each way a restore fails: a transcript gone, an open past its
// deadline, a phase past its deadline, a manifest of another generation. Each counts as a
// failure (the host is degraded), and a wake queued for such a session fails
// restore_wake_failed rather than waiting forever.
func TestRecoveryFailures(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		damage func(t *testing.T, h *turnHost)
		code   string
	}{
		{name: "transcript removed", code: protocol.CodeConversationMissing, damage: func(t *testing.T, h *turnHost) {
			rec, _ := h.st.Record("s")
			if err := os.Remove(rec.Conversation.File); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "open deadline", code: protocol.CodeRecoveryOpenTimeout, cfg: Config{RecoveryOpenTimeout: time.Nanosecond}},
		{name: "phase deadline", code: protocol.CodeRecoveryDeadline, cfg: Config{RecoveryTimeout: time.Nanosecond}},
		{name: "manifest of another generation", code: protocol.CodeManifestGenerationDiffer, damage: func(t *testing.T, h *turnHost) {
			rec, _ := h.st.Record("s")
			man, _ := h.st.Manifest("s")
			rec.Generation = 2
			if err := h.st.SaveSession(rec, man); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newTurnHost(t)
			h.open(t, "s", protocol.ModeNew)
			// A wake left queued: the model holds the first one, the second waits.
			hold := make(chan struct{})
			defer close(hold)
			h.llm.Push(modeltest.Reply{Hold: hold})
			if _, err := h.wake("s", "k1", "first", false); err != nil {
				t.Fatal(err)
			}
			<-h.llm.Arrived(1)
			if _, err := h.wake("s", "k2", "second", false); err != nil {
				t.Fatal(err)
			}
			h.m.Shutdown() // the first is aborted; the second stays queued
			if tc.damage != nil {
				tc.damage(t, h)
			}
			h.st.Close()
			h.startWith(t, tc.cfg)

			health := h.m.Host().Recovery
			if health.Phase != protocol.PhaseDegraded || health.FailureCodes[tc.code] != 1 || health.FailureCodes[protocol.CodeRestoreWakeFailed] != 1 {
				t.Fatalf("recovery: %+v", health)
			}
			r, err := h.m.Ticket(protocol.TicketID("s", "k2"))
			if err != nil || r.Ticket.State != protocol.TicketFailed || r.Ticket.Error.Code != protocol.CodeRestoreWakeFailed {
				t.Fatalf("queued wake: %v %+v", err, r)
			}
			if h.m.Ready() {
				t.Fatal("ready after a failed restore")
			}
		})
	}
}

// TestDrainAbortsTurnsThatOutliveItsTimeout: drain waits for running turns up to its timeout,
// then aborts them; queued wakes stay queued for the next start.
func TestDrainAbortsTurnsThatOutliveItsTimeout(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	defer close(hold)
	h.llm.Push(modeltest.Reply{Hold: hold})
	if _, err := h.wake("s", "k1", "first", false); err != nil {
		t.Fatal(err)
	}
	<-h.llm.Arrived(1)
	if _, err := h.wake("s", "k2", "second", false); err != nil {
		t.Fatal(err)
	}
	res := h.m.Drain(20 * time.Millisecond)
	if !res.TimedOut || res.AbortedTurns != 1 {
		t.Fatalf("drain: %+v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := h.m.Ticket(protocol.TicketID("s", "k1"))
		if err != nil {
			t.Fatal(err)
		}
		if r.Ticket.State == protocol.TicketFailed {
			if r.Ticket.Error.Code != protocol.CodeAborted {
				t.Fatalf("aborted wake: %+v", r.Ticket.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first wake still %s", r.Ticket.State)
		}
		time.Sleep(time.Millisecond)
	}
	if r, _ := h.m.Ticket(protocol.TicketID("s", "k2")); r.Ticket.State != protocol.TicketQueued {
		t.Fatalf("queued wake after drain: %s", r.Ticket.State)
	}
	if _, err := h.wake("s", "k3", "third", false); code(err) != protocol.CodeHostDraining {
		t.Fatalf("wake while draining: %v", err)
	}
	if res := h.m.Drain(time.Second); res.TimedOut || res.AbortedTurns != 0 {
		t.Fatalf("second drain: %+v", res)
	}
}

// TestFailedTurnFailsTheQueueBehindIt: the wakes behind a failed turn fail session_failed at
// once, and a higher generation can replace the failed one.
func TestFailedTurnFailsTheQueueBehindIt(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	h.llm.Push(modeltest.Reply{Status: 500, Hold: hold})
	if _, err := h.wake("s", "k1", "first", false); err != nil {
		t.Fatal(err)
	}
	<-h.llm.Arrived(1)
	if _, err := h.wake("s", "k2", "second", false); err != nil {
		t.Fatal(err)
	}
	close(hold)
	if _, err := h.wake("s", "k2", "second", true); code(err) != protocol.CodeSessionFailed {
		t.Fatalf("queued wake behind a failed turn: %v", err)
	}
	p := &protocol.Policy{Cwd: t.TempDir(), Mode: protocol.ModeNew, Tools: protocol.ResourceNone,
		Model: &protocol.ModelRef{Provider: "local", ID: "m"}}
	if _, err := h.m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 2, Version: v1(), Policy: p}); err != nil {
		t.Fatalf("replacing the failed generation: %v", err)
	}
}

// TestReplaceEndsTheOldGenerationsWork: a replacement cancels the running turn of the old
// generation and fails its queue; no turn of the old generation goes on.
func TestReplaceEndsTheOldGenerationsWork(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	hold := make(chan struct{})
	defer close(hold)
	h.llm.Push(modeltest.Reply{Hold: hold})
	errc := make(chan error, 1)
	go func() {
		_, err := h.wake("s", "k1", "first", true)
		errc <- err
	}()
	<-h.llm.Arrived(1)
	// Busy: a replacement is refused while the turn runs.
	p := &protocol.Policy{Cwd: t.TempDir(), Mode: protocol.ModeNew, Tools: protocol.ResourceNone,
		Model: &protocol.ModelRef{Provider: "local", ID: "m"}}
	if _, err := h.m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 2, Version: v1(), Policy: p}); code(err) != protocol.CodeSessionBusy {
		t.Fatalf("replace while running: %v", err)
	}
	if _, err := h.m.Abort("s", 1); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; code(err) != protocol.CodeAborted {
		t.Fatalf("aborted wake: %v", err)
	}
	if _, err := h.m.Open(context.Background(), OpenRequest{SessionID: "s", Generation: 2, Version: v1(), Policy: p}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.wake("s", "k9", "old generation", true); code(err) != protocol.CodeStaleGeneration {
		t.Fatalf("wake of the replaced generation: %v", err)
	}
}

// TestControlKeysLastTheGeneration: a steer retried with its key in a later turn is not
// delivered again.
func TestControlKeysLastTheGeneration(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	for i, key := range []string{"k1", "k2"} {
		hold := make(chan struct{})
		h.llm.Push(modeltest.Reply{Text: "ok", Hold: hold})
		errc := make(chan error, 1)
		go func() {
			_, err := h.wake("s", key, "q", true)
			errc <- err
		}()
		<-h.llm.Arrived(1 + 2*i) // turn 1 makes two model calls
		if _, err := h.m.Control("s", 1, protocol.OpSteer, "steer-1", "look again"); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if i == 0 {
			h.llm.Push(modeltest.Reply{Text: "after the steer"})
		}
		close(hold)
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// Turn 1 made two model calls (the steer came in during the first); turn 2 only one.
	if n := h.llm.Count(); n != 3 {
		t.Fatalf("%d model calls", n)
	}
}

// TestFailedRecoveryAdmitsNoWork: when the journal cannot be read, no retried wake can be told
// from a new one, so the host admits no work at all until it is restarted.
func TestFailedRecoveryAdmitsNoWork(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "s", protocol.ModeNew)
	h.llm.Push(modeltest.Reply{Text: "done"})
	if _, err := h.wake("s", "k", "question", true); err != nil {
		t.Fatal(err)
	}
	h.stop()
	db, err := bolt.Open(filepath.Join(h.dir, store.DBName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("journal")).Bucket([]byte("s"))
		return b.Put([]byte{0, 0, 0, 0, 0, 0, 0, 99}, []byte("not json"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(h.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{HostInstanceID: "host-test", Store: st,
		Providers: map[string]Provider{"local": {Name: "local", BaseURL: h.llm.URL()}}})
	h.m, h.st = m, st
	if err := m.Recover(); err == nil {
		t.Fatal("recovery over a corrupt journal succeeded")
	}
	if _, err := h.wake("s", "k", "question", true); code(err) != protocol.CodeHostNotReady {
		t.Fatalf("wake after a failed recovery: %v", err)
	}
	if h.llm.Count() != 1 {
		t.Fatalf("%d model calls", h.llm.Count())
	}
}

// TestJournalOperationsWaitForRecovery: before startup recovery has indexed the journal,
// ticket, reconcile and close answer host_not_ready rather than a wrong "not found".
func TestJournalOperationsWaitForRecovery(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := New(Config{Store: st})
	defer m.Shutdown()
	id := protocol.TicketID("s", "k")
	if _, err := m.Ticket(id); code(err) != protocol.CodeHostNotReady {
		t.Fatalf("ticket: %v", err)
	}
	if _, err := m.Reconcile(id, protocol.OutcomeFailed); code(err) != protocol.CodeHostNotReady {
		t.Fatalf("reconcile: %v", err)
	}
	if _, err := m.Close("s", 1, true); code(err) != protocol.CodeHostNotReady {
		t.Fatalf("close: %v", err)
	}
}

// TestRestoreBeyondCapacity: sessions that no longer fit under maxSessions stay dormant, and
// recovery counts each as a session_capacity failure.
func TestRestoreBeyondCapacity(t *testing.T) {
	h := newTurnHost(t)
	h.open(t, "a", protocol.ModeNew)
	h.open(t, "b", protocol.ModeNew)
	h.stop()
	st, err := store.Open(h.dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := New(Config{Store: st, MaxSessions: 1,
		Providers: map[string]Provider{"local": {Name: "local", BaseURL: h.llm.URL()}}})
	h.m, h.st = m, st
	if err := m.Recover(); err != nil {
		t.Fatal(err)
	}
	health := m.Host().Recovery
	if health.RestoredSessions != 1 || health.FailureCodes[protocol.CodeSessionCapacity] != 1 || health.Phase != protocol.PhaseDegraded {
		t.Fatalf("recovery: %+v", health)
	}
}

// TestCloseWaitsForTheAbortedTurn: a close returns only once the worker of the turn it aborted
// has stopped — the wake's outcome is recorded and the transcript closed — so a reopen of the
// same generation right after cannot meet a late append of the old turn to the same file.
func TestCloseWaitsForTheAbortedTurn(t *testing.T) {
	h := newTurnHost(t)
	p := turnPolicy(t, protocol.ModeNew)
	h.openPolicy(t, "s", p)
	hold := make(chan struct{})
	defer close(hold)
	h.llm.Push(modeltest.Reply{Hold: hold})
	if _, err := h.wake("s", "k1", "first", false); err != nil {
		t.Fatal(err)
	}
	<-h.llm.Arrived(1)
	if _, err := h.m.Close("s", 1, true); err != nil {
		t.Fatal(err)
	}
	r, err := h.m.Ticket(protocol.TicketID("s", "k1"))
	if err != nil || r.Ticket.State != protocol.TicketFailed {
		t.Fatalf("the aborted wake when close returned: %v %+v", err, r)
	}
	h.openPolicy(t, "s", p) // the same generation, on the same transcript
	h.llm.Push(modeltest.Reply{Text: "again"})
	v, err := h.wake("s", "k2", "second", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(t, v); got != "again" {
		t.Fatalf("after the reopen: %q", got)
	}
}

// TestDeleteLeavesNoJournalEntry: wakes admitted while a close with delete begins write their
// journal entries before the session's records go, so none is left for a session that no
// longer exists.
func TestDeleteLeavesNoJournalEntry(t *testing.T) {
	h := newTurnHost(t)
	h.llm.SetDefault(modeltest.Reply{Text: "ok"})
	for i := range 20 {
		h.open(t, "s", protocol.ModeNew)
		var wg sync.WaitGroup
		for g := range 6 {
			wg.Go(func() { h.wake("s", fmt.Sprintf("k%d-%d", i, g), "p", false) })
		}
		if _, err := h.m.Close("s", 1, false); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		entries, err := h.st.RecoverJournal()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.SessionID == "s" {
				t.Fatalf("round %d: journal entry %s (%s) left behind by the delete", i, e.IdempotencyKey, e.State)
			}
		}
	}
}

// TestMemoryHistoryBounded: a memory session's history, which no transcript bounds, keeps the
// newest whole turns within maxMemoryHistory messages and maxMemoryHistoryBytes of text. Before,
// only the count was bounded (4096 messages of up to a model answer's megabytes each), and a
// cut by count could leave the history starting with a tool result whose call was cut away.
func TestMemoryHistoryBounded(t *testing.T) {
	const answer = 3000
	for _, tc := range []struct {
		name            string
		messages, bytes int
		wantMessages    int
	}{
		// A turn is 4 messages: the prompt, a tool call, its result and the answer. A cut at
		// 6 messages falls inside a turn; the history then starts at the next prompt.
		{"count", 6, 1 << 20, 4},
		// Three turns hold over 9000 bytes: two fit 8000.
		{"bytes", 1000, 8000, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(n, b int) { maxMemoryHistory, maxMemoryHistoryBytes = n, b }(maxMemoryHistory, maxMemoryHistoryBytes)
			maxMemoryHistory, maxMemoryHistoryBytes = tc.messages, tc.bytes
			h := newTurnHost(t)
			h.open(t, "mem", protocol.ModeMemory)
			for i := range 5 {
				h.llm.Push(modeltest.Reply{ToolCalls: []model.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "fs_read", Arguments: `{}`}}},
					modeltest.Reply{Text: strings.Repeat("a", answer)})
				if _, err := h.wake("mem", fmt.Sprintf("k%d", i), fmt.Sprintf("q%d", i), true); err != nil {
					t.Fatal(err)
				}
				h.m.mu.Lock()
				hist := h.m.sessions["mem"].history
				h.m.mu.Unlock()
				size := 0
				for _, msg := range hist {
					size += messageBytes(msg)
				}
				if len(hist) > tc.messages || size > tc.bytes {
					t.Fatalf("after wake %d the history holds %d messages, %d bytes; bounds %d, %d", i, len(hist), size, tc.messages, tc.bytes)
				}
				if len(hist) == 0 || hist[0].Role != model.RoleUser {
					t.Fatalf("after wake %d the history starts with %+v, not a prompt", i, hist[:min(1, len(hist))])
				}
			}
			h.m.mu.Lock()
			n := len(h.m.sessions["mem"].history)
			h.m.mu.Unlock()
			if n != tc.wantMessages {
				t.Errorf("history of %d messages after 5 turns, want %d", n, tc.wantMessages)
			}
			// The last model call was sent what the history held, then this turn's prompt.
			reqs := h.llm.Requests()
			last := reqs[len(reqs)-2].Request.Messages
			if len(last) != tc.wantMessages+1 || last[0].Role != model.RoleUser {
				t.Errorf("the last turn sent %d messages starting with %s, want %d starting with a prompt", len(last), last[0].Role, tc.wantMessages+1)
			}
		})
	}
}

// TestMemoryResultsBounded: the results a memory session keeps to answer a retry of an ended
// wake are bounded in bytes as well as in count (maxTerminalEntries): the oldest go first.
// Before, 256 answers of a model's megabytes each stayed in memory per session.
func TestMemoryResultsBounded(t *testing.T) {
	defer func(n int) { maxMemoryResultBytes = n }(maxMemoryResultBytes)
	maxMemoryResultBytes = 10000
	h := newTurnHost(t)
	h.open(t, "mem", protocol.ModeMemory)
	for i := range 6 {
		h.llm.Push(modeltest.Reply{Text: strings.Repeat("a", 3000)})
		if _, err := h.wake("mem", fmt.Sprintf("k%d", i), "q", true); err != nil {
			t.Fatal(err)
		}
		h.m.mu.Lock()
		kept, n := 0, len(h.m.terminals["mem"])
		for _, r := range h.m.terminals["mem"] {
			kept += len(r.result)
		}
		h.m.mu.Unlock()
		if kept > maxMemoryResultBytes {
			t.Fatalf("after wake %d the session keeps %d entries with %d bytes of results, over %d", i, n, kept, maxMemoryResultBytes)
		}
		if i >= 3 && n != 3 {
			t.Errorf("after wake %d the session keeps %d entries, want the newest 3", i, n)
		}
	}
	// A retry of a kept wake is answered from memory; one of a retired wake runs again.
	calls := h.llm.Count()
	if _, err := h.wake("mem", "k5", "q", true); err != nil || h.llm.Count() != calls {
		t.Errorf("retry of a kept wake: %v, model calls %d -> %d", err, calls, h.llm.Count())
	}
	h.llm.Push(modeltest.Reply{Text: "again"})
	if v, err := h.wake("mem", "k0", "q", true); err != nil || resultText(t, v) != "again" {
		t.Errorf("retry of a retired wake: %v", err)
	}
}
