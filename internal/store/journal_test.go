package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

var t1 = t0.Add(time.Hour)

func testWake(session string, n int) JournalEntry {
	return JournalEntry{
		SessionID:      session,
		Generation:     1,
		IdempotencyKey: fmt.Sprintf("idem-%d", n),
		RequestID:      fmt.Sprintf("req-%d", n),
		TicketID:       fmt.Sprintf("ticket-%d", n),
		Fingerprint:    "sha256:0123456789abcdef",
		State:          JournalQueued,
		Prompt:         fmt.Sprintf("wake %d: check the build", n),
		Source:         "schedule",
	}
}

func appendT(t testing.TB, s *Store, e JournalEntry) JournalEntry {
	t.Helper()
	got, err := s.AppendJournal(e)
	if err != nil {
		t.Fatalf("AppendJournal(%s): %v", e.SessionID, err)
	}
	return got
}

func updateT(t testing.TB, s *Store, session string, seq uint64, to string) JournalEntry {
	t.Helper()
	got, err := s.UpdateJournal(session, seq, to, nil, nil, nil)
	if err != nil {
		t.Fatalf("UpdateJournal(%s, %d, %s): %v", session, seq, to, err)
	}
	return got
}

func entryT(t testing.TB, s *Store, session string, seq uint64) *JournalEntry {
	t.Helper()
	e, err := s.JournalEntry(session, seq)
	if err != nil {
		t.Fatalf("JournalEntry(%s, %d): %v", session, seq, err)
	}
	return e
}

// holdFirstGroup makes the first group's leader wait until n ops are pending, so that they
// all run in that group whatever the scheduling.
func holdFirstGroup(t *testing.T, s *Store, n int) {
	var once sync.Once
	s.group.beforeGroup = func() {
		once.Do(func() {
			deadline := time.Now().Add(10 * time.Second)
			for {
				s.group.mu.Lock()
				k := len(s.group.pending)
				s.group.mu.Unlock()
				if k >= n {
					return
				}
				if time.Now().After(deadline) {
					t.Errorf("only %d of %d ops arrived for the first group", k, n)
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

func TestJournalRoundTrip(t *testing.T) {
	s := openT(t, newDir(t))
	if e := entryT(t, s, "a", 1); e != nil {
		t.Errorf("JournalEntry of an empty journal = %+v", e)
	}

	w := testWake("a", 1)
	got := appendT(t, s, w)
	want := w
	want.FormatVersion, want.Seq, want.CreatedAt, want.UpdatedAt = JournalFormatVersion, 1, t0, t0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("AppendJournal = %+v, want %+v", got, want)
	}
	if e := entryT(t, s, "a", 1); e == nil || !reflect.DeepEqual(*e, want) {
		t.Errorf("JournalEntry(a, 1) = %+v, want %+v", e, want)
	}

	// Seqs increase per session; caller-set times are kept.
	w2 := testWake("a", 2)
	w2.CreatedAt = t0.Add(-time.Minute)
	if e := appendT(t, s, w2); e.Seq != 2 || !e.CreatedAt.Equal(w2.CreatedAt) || !e.UpdatedAt.Equal(w2.CreatedAt) {
		t.Errorf("second append = seq %d, createdAt %v, updatedAt %v", e.Seq, e.CreatedAt, e.UpdatedAt)
	}
	if e := appendT(t, s, testWake("b", 1)); e.Seq != 1 {
		t.Errorf("first append of session b has seq %d, want 1", e.Seq)
	}

	updateT(t, s, "a", 1, JournalAccepted)
	result := json.RawMessage(`{"text":"done","turns":3}`)
	done, err := s.UpdateJournal("a", 1, JournalCompleted, result, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// An ended wake keeps its outcome, not its prompt (TestJournalEndedEntryDropsPrompt).
	want.State, want.Result, want.Prompt = JournalCompleted, result, ""
	if !reflect.DeepEqual(done, want) {
		t.Errorf("UpdateJournal = %+v, want %+v", done, want)
	}
	if e := entryT(t, s, "a", 1); e == nil || !reflect.DeepEqual(*e, want) {
		t.Errorf("JournalEntry(a, 1) after completion = %+v, want %+v", e, want)
	}

	werr := protocol.Errorf(protocol.CodeOpenFailed, "runtime would not start").With("reason", "exit 1")
	failed, err := s.UpdateJournal("a", 2, JournalFailed, nil, werr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e := entryT(t, s, "a", 2); e == nil || !reflect.DeepEqual(*e, failed) || !reflect.DeepEqual(e.Error, werr) || e.Result != nil {
		t.Errorf("JournalEntry(a, 2) = %+v, want %+v with error %+v", e, failed, werr)
	}
	if e := entryT(t, s, "a", 3); e != nil {
		t.Errorf("JournalEntry(a, 3) = %+v, want nil", e)
	}
}

// stateVia lists the moves that bring a new entry to each state.
var stateVia = map[string][]string{
	JournalQueued:        nil,
	JournalAccepted:      {JournalAccepted},
	JournalCompleted:     {JournalAccepted, JournalCompleted},
	JournalFailed:        {JournalFailed},
	JournalIndeterminate: {JournalAccepted, JournalIndeterminate},
}

func TestJournalTransitions(t *testing.T) {
	allowed := map[[2]string]bool{
		{JournalQueued, JournalAccepted}:             true,
		{JournalQueued, JournalFailed}:               true,
		{JournalAccepted, JournalCompleted}:          true,
		{JournalAccepted, JournalFailed}:             true,
		{JournalAccepted, JournalIndeterminate}:      true,
		{JournalIndeterminate, JournalCompleted}:     true,
		{JournalIndeterminate, JournalFailed}:        true,
		{JournalCompleted, JournalCompleted}:         false, // spelled out: no move to the same state
		{JournalIndeterminate, JournalAccepted}:      false,
		{JournalIndeterminate, JournalQueued}:        false,
		{JournalFailed, JournalCompleted}:            false,
		{JournalCompleted, JournalIndeterminate}:     false,
		{JournalQueued, JournalIndeterminate}:        false,
		{JournalAccepted, JournalAccepted}:           false,
		{JournalQueued, JournalCompleted}:            false,
		{JournalIndeterminate, JournalIndeterminate}: false,
	}
	states := []string{JournalQueued, JournalAccepted, JournalCompleted, JournalFailed, JournalIndeterminate}
	s := openT(t, newDir(t))
	n := 0
	for _, from := range states {
		for _, to := range append(states, "", "cancelled") {
			t.Run(from+"_to_"+to, func(t *testing.T) {
				n++
				e := appendT(t, s, testWake("s", n))
				for _, step := range stateVia[from] {
					updateT(t, s, "s", e.Seq, step)
				}
				before := entryT(t, s, "s", e.Seq)
				got, err := s.UpdateJournal("s", e.Seq, to, nil, nil, nil)
				if allowed[[2]string{from, to}] {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					if got.State != to || got.Reconciled != (from == JournalIndeterminate) {
						t.Errorf("state %s, reconciled %v", got.State, got.Reconciled)
					}
					if after := entryT(t, s, "s", e.Seq); !reflect.DeepEqual(*after, got) {
						t.Errorf("stored %+v, returned %+v", after, got)
					}
					return
				}
				pe := wantCode(t, err, protocol.CodeInvalidJournalTransition)
				if pe.Details["from"] != from || pe.Details["to"] != to {
					t.Errorf("details %v, want from %s to %q", pe.Details, from, to)
				}
				if after := entryT(t, s, "s", e.Seq); !reflect.DeepEqual(after, before) {
					t.Errorf("a refused move changed the entry: %+v -> %+v", before, after)
				}
			})
		}
	}
}

func TestAppendJournalRefused(t *testing.T) {
	s := openT(t, newDir(t))
	for _, state := range []string{"", JournalAccepted, JournalCompleted, "bogus"} {
		w := testWake("s", 1)
		w.State = state
		_, err := s.AppendJournal(w)
		if pe := wantCode(t, err, protocol.CodeInvalidJournalTransition); pe.Details["to"] != state {
			t.Errorf("details %v", pe.Details)
		}
	}
	for _, id := range []string{"", strings.Repeat("x", protocol.MaxSessionIDLen+1), "\xff"} {
		_, err := s.AppendJournal(testWake(id, 1))
		wantCode(t, err, protocol.CodeDurabilityFailed)
	}
	if s.group.commits.Load() != 0 {
		t.Errorf("refused appends ran %d commits", s.group.commits.Load())
	}
	if e := entryT(t, s, "s", 1); e != nil {
		t.Errorf("a refused append was stored: %+v", e)
	}
}

func TestUpdateJournalMissing(t *testing.T) {
	s := openT(t, newDir(t))
	appendT(t, s, testWake("a", 1))
	for _, tc := range []struct {
		session string
		seq     uint64
	}{{"a", 2}, {"a", 0}, {"b", 1}} {
		_, err := s.UpdateJournal(tc.session, tc.seq, JournalAccepted, nil, nil, nil)
		wantCode(t, err, protocol.CodeJournalEntryMissing)
	}
}

func TestJournalRecordTooLarge(t *testing.T) {
	s := openT(t, newDir(t))
	w := testWake("s", 1)
	w.Prompt = strings.Repeat("p", MaxJournalRecordBytes)
	_, err := s.AppendJournal(w)
	wantCode(t, err, protocol.CodeJournalRecordTooLarge)
	if s.group.commits.Load() != 0 {
		t.Error("a refused append reached a commit")
	}

	// An entry just under the limit is taken, and still fits once it is indeterminate and
	// reconciled.
	w.Prompt = strings.Repeat("p", MaxJournalRecordBytes-600)
	e := appendT(t, s, w)
	updateT(t, s, "s", e.Seq, JournalAccepted)
	if _, err := s.RecoverJournal(); err != nil {
		t.Fatal(err)
	}
	updateT(t, s, "s", e.Seq, JournalFailed)

	// A result that would push an entry over the limit is refused and changes nothing.
	small := appendT(t, s, testWake("s", 2))
	updateT(t, s, "s", small.Seq, JournalAccepted)
	before := entryT(t, s, "s", small.Seq)
	big := json.RawMessage(`"` + strings.Repeat("r", MaxJournalRecordBytes) + `"`)
	_, err = s.UpdateJournal("s", small.Seq, JournalCompleted, big, nil, nil)
	wantCode(t, err, protocol.CodeJournalRecordTooLarge)
	if after := entryT(t, s, "s", small.Seq); !reflect.DeepEqual(after, before) {
		t.Errorf("a refused update changed the entry: %+v", after)
	}
}

// An ended wake's entry keeps its outcome and drops its prompt, which only a queued wake
// needs (to run after a restart). Before, the retained entries of a few sessions whose wakes
// carried large prompts added up past MaxJournalBytes, a journal the next start refused as
// corrupt, and a large prompt with a large result could not record its outcome at all.
func TestJournalEndedEntryDropsPrompt(t *testing.T) {
	s := openT(t, newDir(t))
	prompt := strings.Repeat("p", MaxJournalRecordBytes/2)
	result := json.RawMessage(`"` + strings.Repeat("r", MaxJournalRecordBytes/2) + `"`)
	storedBytes := func(seq uint64) int {
		t.Helper()
		n := 0
		if err := s.db.View(func(tx *bolt.Tx) error {
			n = len(tx.Bucket(bucketJournal).Bucket([]byte("s")).Get(seqKey(seq)))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, to := range []string{JournalCompleted, JournalFailed, JournalIndeterminate} {
		w := testWake("s", i+1)
		w.Prompt = prompt
		e := appendT(t, s, w)
		updateT(t, s, "s", e.Seq, JournalAccepted)
		var res json.RawMessage
		var werr *protocol.Error
		switch to {
		case JournalCompleted:
			res = result
		case JournalFailed:
			werr = protocol.Errorf(protocol.CodeAborted, "aborted")
		}
		if to == JournalIndeterminate {
			if _, err := s.RecoverJournal(); err != nil {
				t.Fatal(err)
			}
			// Indeterminate is not ended: an operator's reconcile still decides it.
			if got := entryT(t, s, "s", e.Seq); got.State != JournalIndeterminate || got.Prompt != prompt {
				t.Fatalf("indeterminate entry: state %s, prompt of %d bytes, want its prompt", got.State, len(got.Prompt))
			}
			res, to = json.RawMessage(`{"stopReason":"reconciled"}`), JournalCompleted
		}
		got, err := s.UpdateJournal("s", e.Seq, to, res, werr, nil)
		if err != nil {
			t.Fatalf("ending entry %d as %s: %v", e.Seq, to, err)
		}
		stored := entryT(t, s, "s", e.Seq)
		if got.Prompt != "" || stored.Prompt != "" {
			t.Errorf("entry %d ended %s keeps a prompt of %d bytes", e.Seq, to, len(stored.Prompt))
		}
		if stored.Fingerprint != w.Fingerprint || stored.IdempotencyKey != w.IdempotencyKey {
			t.Errorf("entry %d lost what deduplicates a retry: %+v", e.Seq, stored)
		}
		if n, bound := storedBytes(e.Seq), len(res)+2048; n > bound {
			t.Errorf("entry %d ended %s holds %d bytes, want at most %d (its outcome and ids)", e.Seq, to, n, bound)
		}
	}
}

// What the store could not read back is never written.
func TestUpdateJournalRefusesUnreadable(t *testing.T) {
	s := openT(t, newDir(t))
	e := appendT(t, s, testWake("s", 1))
	for _, result := range []string{`{"a":1,"a":2}`, `{"a":`, ``} {
		_, err := s.UpdateJournal("s", e.Seq, JournalAccepted, json.RawMessage(result), nil, nil)
		wantCode(t, err, protocol.CodeDurabilityFailed)
	}
	_, err := s.UpdateJournal("s", e.Seq, JournalFailed, nil, protocol.Errorf("x", "y").With("f", func() {}), nil)
	wantCode(t, err, protocol.CodeDurabilityFailed)
	if got := entryT(t, s, "s", e.Seq); got.State != JournalQueued {
		t.Errorf("state %s after refused updates", got.State)
	}
}

func TestUpdateJournalPrunes(t *testing.T) {
	s := openT(t, newDir(t))
	for i := 1; i <= 5; i++ {
		appendT(t, s, testWake("s", i))
	}
	appendT(t, s, testWake("other", 1))
	updateT(t, s, "s", 1, JournalFailed)
	updateT(t, s, "s", 2, JournalAccepted)
	updateT(t, s, "s", 2, JournalCompleted)
	updateT(t, s, "s", 4, JournalAccepted)
	updateT(t, s, "other", 1, JournalFailed)

	// Pruning a live entry is refused, and the update with it.
	before := lastCommits(s)
	_, err := s.UpdateJournal("s", 4, JournalCompleted, nil, nil, []uint64{1, 3})
	pe := wantCode(t, err, protocol.CodeInvalidJournalTransition)
	if pe.Details["to"] != "pruned" || pe.Details["from"] != JournalQueued {
		t.Errorf("details %v", pe.Details)
	}
	if e := entryT(t, s, "s", 1); e == nil {
		t.Error("a refused update pruned entry 1")
	}
	if e := entryT(t, s, "s", 4); e.State != JournalAccepted {
		t.Errorf("a refused update moved entry 4 to %s", e.State)
	}

	// Missing entries and the entry being updated are skipped; the rest go in the same commit.
	if _, err := s.UpdateJournal("s", 4, JournalCompleted, nil, nil, []uint64{1, 2, 4, 99, 2}); err != nil {
		t.Fatal(err)
	}
	if got := lastCommits(s) - before; got != 2 {
		t.Errorf("%d commits, want 2 (one each, the refused one writing nothing)", got)
	}
	for seq, want := range map[uint64]bool{1: false, 2: false, 3: true, 4: true, 5: true} {
		if e := entryT(t, s, "s", seq); (e != nil) != want {
			t.Errorf("entry %d present = %v, want %v", seq, e != nil, want)
		}
	}
	if e := entryT(t, s, "s", 4); e.State != JournalCompleted {
		t.Errorf("entry 4 is %s", e.State)
	}
	if e := entryT(t, s, "other", 1); e == nil {
		t.Error("the prune reached another session")
	}
	// Seqs are never reused after a prune.
	if e := appendT(t, s, testWake("s", 6)); e.Seq != 6 {
		t.Errorf("seq after prune = %d, want 6", e.Seq)
	}
}

func lastCommits(s *Store) uint64 { return s.group.commits.Load() }

func TestDeleteSessionDeletesJournal(t *testing.T) {
	s := openT(t, newDir(t))
	a := testRecord("a")
	save(t, s, &a, testManifest("a", 1))
	appendT(t, s, testWake("a", 1))
	appendT(t, s, testWake("a", 2))
	appendT(t, s, testWake("b", 1)) // a journal without a catalog record
	appendT(t, s, testWake("c", 1))

	for _, id := range []string{"a", "b"} {
		if existed, err := s.DeleteSession(id); err != nil || !existed {
			t.Fatalf("DeleteSession(%s) = %v, %v, want true", id, existed, err)
		}
		if e := entryT(t, s, id, 1); e != nil {
			t.Errorf("journal entry of %s survived DeleteSession: %+v", id, e)
		}
		if existed, err := s.DeleteSession(id); existed || err != nil {
			t.Errorf("second DeleteSession(%s) = %v, %v, want false, nil", id, existed, err)
		}
	}
	entries, err := s.RecoverJournal()
	if err != nil || len(entries) != 1 || entries[0].SessionID != "c" {
		t.Errorf("RecoverJournal after deletes = %+v, %v", entries, err)
	}
	// A re-created session's journal starts again at seq 1.
	if e := appendT(t, s, testWake("a", 3)); e.Seq != 1 {
		t.Errorf("seq of re-created session = %d, want 1", e.Seq)
	}
}

func TestRecoverJournal(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	// Appended out of session order; recovery returns them by session, then seq.
	for i, id := range []string{"b", "a", "b", "a", "b", "c"} {
		appendT(t, s, testWake(id, i))
	}
	updateT(t, s, "b", 1, JournalAccepted) // becomes indeterminate
	updateT(t, s, "b", 2, JournalAccepted)
	updateT(t, s, "b", 2, JournalCompleted)
	updateT(t, s, "a", 2, JournalAccepted) // becomes indeterminate
	updateT(t, s, "c", 1, JournalFailed)
	s.Close()

	s, err := Open(dir, Options{Now: func() time.Time { return t1 }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entries, err := s.RecoverJournal()
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		session string
		seq     uint64
		state   string
		updated time.Time
	}
	var got []key
	for _, e := range entries {
		got = append(got, key{e.SessionID, e.Seq, e.State, e.UpdatedAt})
	}
	want := []key{
		{"a", 1, JournalQueued, t0},
		{"a", 2, JournalIndeterminate, t1},
		{"b", 1, JournalIndeterminate, t1},
		{"b", 2, JournalCompleted, t0},
		{"b", 3, JournalQueued, t0},
		{"c", 1, JournalFailed, t0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RecoverJournal =\n%v\nwant\n%v", got, want)
	}
	for _, e := range entries {
		if stored := entryT(t, s, e.SessionID, e.Seq); !reflect.DeepEqual(*stored, e) {
			t.Errorf("stored %+v, returned %+v", stored, e)
		}
	}
	// An indeterminate entry is reconciled by an operator.
	if e, err := s.UpdateJournal("a", 2, JournalCompleted, json.RawMessage(`{"by":"operator"}`), nil, nil); err != nil || !e.Reconciled {
		t.Errorf("reconcile = %+v, %v", e, err)
	}

	// Nothing accepted: recovery writes nothing.
	s.Close()
	before := lastTxID(t, s.Path())
	s = openT(t, dir)
	again, err := s.RecoverJournal()
	if err != nil || len(again) != len(entries) {
		t.Fatalf("second RecoverJournal = %d entries, %v", len(again), err)
	}
	s.Close()
	if after := lastTxID(t, s.Path()); after != before {
		t.Errorf("a recovery with nothing to change committed: txid %d -> %d", before, after)
	}
}

func TestRecoverJournalEmpty(t *testing.T) {
	s := openT(t, newDir(t))
	if entries, err := s.RecoverJournal(); err != nil || entries != nil {
		t.Errorf("RecoverJournal of an empty journal = %+v, %v", entries, err)
	}
}

func TestJournalCorrupt(t *testing.T) {
	valid := func() map[string]any {
		e := testWake("bad", 1)
		e.FormatVersion, e.Seq, e.CreatedAt, e.UpdatedAt = JournalFormatVersion, 1, t0, t0
		data, _ := json.Marshal(&e)
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	edit := func(f func(m map[string]any)) []byte {
		m := valid()
		f(m)
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	put := func(raw []byte) func(tx *bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			b, err := tx.Bucket(bucketJournal).CreateBucketIfNotExists([]byte("bad"))
			if err != nil {
				return err
			}
			return b.Put(seqKey(1), raw)
		}
	}
	cases := []struct {
		name  string
		write func(tx *bolt.Tx) error
		want  string
	}{
		{"not JSON", put([]byte("\x00SENTINEL-VALUE")), "does not decode"},
		{"truncated JSON", put(edit(func(map[string]any) {})[:40]), "does not decode"},
		{"unknown field", put(edit(func(m map[string]any) { m["handle"] = "SENTINEL-VALUE" })), "does not decode"},
		{"bad timestamp", put(edit(func(m map[string]any) { m["createdAt"] = "SENTINEL-VALUE" })), "does not decode"},
		{"null member", put(edit(func(m map[string]any) { m["prompt"] = nil })), "does not decode"},
		{"another session", put(edit(func(m map[string]any) { m["sessionId"] = "other" })), "names another session"},
		{"seq differs from key", put(edit(func(m map[string]any) { m["seq"] = 2 })), "stored under seq 1"},
		{"unknown state", put(edit(func(m map[string]any) { m["state"] = "SENTINEL-VALUE" })), "unknown state"},
		{"unknown formatVersion", put(edit(func(m map[string]any) { m["formatVersion"] = 2 })), "unknown formatVersion 2"},
		{"key not a seq", func(tx *bolt.Tx) error {
			b, err := tx.Bucket(bucketJournal).CreateBucketIfNotExists([]byte("bad"))
			if err != nil {
				return err
			}
			return b.Put([]byte("1"), edit(func(map[string]any) {}))
		}, "not a seq"},
		{"value for a session", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketJournal).Put([]byte("bad"), []byte("SENTINEL-VALUE"))
		}, "not a bucket"},
		{"nested bucket", func(tx *bolt.Tx) error {
			b, err := tx.Bucket(bucketJournal).CreateBucketIfNotExists([]byte("bad"))
			if err != nil {
				return err
			}
			_, err = b.CreateBucket(seqKey(1))
			return err
		}, "nested bucket"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			s := openT(t, dir)
			appendT(t, s, testWake("good", 1))
			updateT(t, s, "good", 1, JournalAccepted)
			s.Close()
			rawUpdate(t, s.Path(), tc.write)
			var before []byte
			rawView(t, s.Path(), func(tx *bolt.Tx) error {
				before = bytes.Clone(tx.Bucket(bucketJournal).Bucket([]byte("good")).Get(seqKey(1)))
				return nil
			})
			s = openT(t, dir)

			check := func(op string, err error) {
				t.Helper()
				pe := wantCode(t, err, protocol.CodeCorruptJournal)
				if !strings.Contains(pe.Message, `"bad"`) || !strings.Contains(pe.Message, tc.want) {
					t.Errorf("%s: message %q should name session \"bad\" and say %q", op, pe.Message, tc.want)
				}
				if strings.Contains(err.Error(), "SENTINEL") {
					t.Errorf("%s: error %q quotes the stored entry", op, err)
				}
			}
			_, err := s.RecoverJournal()
			check("RecoverJournal", err)
			// The entry-level cases also fail a read or an update of that entry.
			if !strings.HasPrefix(tc.name, "key") && !strings.HasPrefix(tc.name, "value") && tc.name != "nested bucket" {
				_, err = s.JournalEntry("bad", 1)
				check("JournalEntry", err)
				_, err = s.UpdateJournal("bad", 1, JournalAccepted, nil, nil, nil)
				check("UpdateJournal", err)
			}
			s.Close()
			rawView(t, s.Path(), func(tx *bolt.Tx) error {
				if after := tx.Bucket(bucketJournal).Bucket([]byte("good")).Get(seqKey(1)); !bytes.Equal(after, before) {
					t.Error("a failed recovery changed another session's entry")
				}
				return nil
			})
		})
	}
}

// An append never overwrites an entry, even when the bucket's sequence was set back.
func TestAppendJournalNeverOverwrites(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	appendT(t, s, testWake("s", 1))
	appendT(t, s, testWake("s", 2))
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJournal).Bucket([]byte("s")).SetSequence(1)
	})
	s = openT(t, dir)
	_, err := s.AppendJournal(testWake("s", 3))
	wantCode(t, err, protocol.CodeCorruptJournal)
	if e := entryT(t, s, "s", 2); e == nil || e.IdempotencyKey != "idem-2" {
		t.Errorf("entry 2 = %+v", e)
	}
}

func TestJournalSurvivesReopen(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	var want []JournalEntry
	for i := range 3 {
		want = append(want, appendT(t, s, testWake("s", i)))
	}
	want[0] = updateT(t, s, "s", 1, JournalFailed)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir)
	got, err := s.RecoverJournal()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after reopen: %+v, %v\nwant %+v", got, err, want)
	}
	if e := appendT(t, s, testWake("s", 9)); e.Seq != 4 {
		t.Errorf("seq after reopen = %d, want 4", e.Seq)
	}
}

// A schema 2 database gains the journal bucket when opened.
func TestOpenMigratesToJournal(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	a := testRecord("a")
	save(t, s, &a, nil)
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketJournal); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte("2"))
	})
	s = openT(t, dir)
	appendT(t, s, testWake("a", 1))
	if r, err := s.Record("a"); err != nil || r == nil {
		t.Errorf("Record(a) after the migration = %+v, %v", r, err)
	}
	s.Close()
	rawView(t, s.Path(), func(tx *bolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchemaVersion)); v != strconv.Itoa(latestSchema()) {
			t.Errorf("schemaVersion = %q, want %d", v, latestSchema())
		}
		return nil
	})
}

func TestJournalConcurrentAppendsGroup(t *testing.T) {
	s := openT(t, newDir(t))
	const workers, each, sessions = 64, 16, 8
	holdFirstGroup(t, s, workers)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs = map[string]map[uint64]bool{}
	)
	for w := range workers {
		wg.Go(func() {
			id := fmt.Sprintf("s%d", w%sessions)
			for i := range each {
				e, err := s.AppendJournal(testWake(id, w*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seqs[id] == nil {
					seqs[id] = map[uint64]bool{}
				}
				if seqs[id][e.Seq] {
					t.Errorf("seq %d of %s handed out twice", e.Seq, id)
				}
				seqs[id][e.Seq] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	appends := uint64(workers * each)
	if commits := lastCommits(s); commits >= appends {
		t.Errorf("%d commits for %d appends: group commit did not group", commits, appends)
	} else {
		t.Logf("%d commits for %d appends", commits, appends)
	}
	entries, err := s.RecoverJournal()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != int(appends) {
		t.Fatalf("%d entries stored, want %d", len(entries), appends)
	}
	perSession := workers / sessions * each
	for i, e := range entries {
		if want := uint64(i%perSession + 1); e.Seq != want || !seqs[e.SessionID][e.Seq] {
			t.Errorf("entry %d is %s/%d, want seq %d", i, e.SessionID, e.Seq, want)
		}
	}
}

// Refused ops in a group write nothing and do not stop the others from committing.
func TestJournalGroupIsolatesRefusals(t *testing.T) {
	s := openT(t, newDir(t))
	appendT(t, s, testWake("s", 0)) // seq 1, queued
	before := lastCommits(s)
	holdFirstGroup(t, s, 5)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	wg.Go(func() { _, errs[0] = s.AppendJournal(testWake("s", 1)) })
	wg.Go(func() { _, errs[1] = s.UpdateJournal("s", 99, JournalAccepted, nil, nil, nil) })
	wg.Go(func() { _, errs[2] = s.UpdateJournal("s", 1, JournalCompleted, nil, nil, nil) })
	wg.Go(func() { _, errs[3] = s.AppendJournal(testWake("t", 1)) })
	wg.Go(func() { _, errs[4] = s.UpdateJournal("nosuch", 1, JournalFailed, nil, nil, nil) })
	wg.Wait()
	if got := lastCommits(s) - before; got != 1 {
		t.Errorf("%d commits, want one group", got)
	}
	if errs[0] != nil || errs[3] != nil {
		t.Errorf("valid appends failed: %v, %v", errs[0], errs[3])
	}
	wantCode(t, errs[1], protocol.CodeJournalEntryMissing)
	wantCode(t, errs[2], protocol.CodeInvalidJournalTransition)
	wantCode(t, errs[4], protocol.CodeJournalEntryMissing)
	if e := entryT(t, s, "s", 2); e == nil {
		t.Error("the append in the group was lost")
	}
	if e := entryT(t, s, "t", 1); e == nil {
		t.Error("the other session's append in the group was lost")
	}
	if e := entryT(t, s, "s", 1); e.State != JournalQueued {
		t.Errorf("a refused update wrote: %+v", e)
	}
}

// An op that fails while writing, or panics, rolls the group back: every other op gets
// durability_failed, and the next group commits normally.
func TestJournalGroupFailureFailsGroup(t *testing.T) {
	for name, bad := range map[string]func(tx *bolt.Tx) error{
		"write error": func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketJournal).Put([]byte("junk"), []byte("x")); err != nil {
				return err
			}
			return errors.New("disk on fire")
		},
		"panic": func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketJournal).Put([]byte("junk"), []byte("x")); err != nil {
				return err
			}
			panic("disk on fire")
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := openT(t, newDir(t))
			holdFirstGroup(t, s, 2)
			var wg sync.WaitGroup
			var appendErr, badErr error
			wg.Go(func() { _, appendErr = s.AppendJournal(testWake("s", 1)) })
			wg.Go(func() { badErr = s.commit("bad op", bad) })
			wg.Wait()
			for _, err := range []error{appendErr, badErr} {
				wantCode(t, err, protocol.CodeDurabilityFailed)
				if !strings.Contains(err.Error(), "disk on fire") {
					t.Errorf("error %q lacks the cause", err)
				}
			}
			if e := entryT(t, s, "s", 1); e != nil {
				t.Errorf("the rolled-back append is stored: %+v", e)
			}
			if e := appendT(t, s, testWake("s", 2)); e.Seq != 1 {
				t.Errorf("seq after a rolled-back group = %d, want 1", e.Seq)
			}
			if _, err := s.RecoverJournal(); err != nil {
				t.Errorf("the bad op's write survived: %v", err)
			}
		})
	}
}

func TestJournalClosedStore(t *testing.T) {
	s := openT(t, newDir(t))
	appendT(t, s, testWake("s", 1))
	s.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := s.AppendJournal(testWake("s", i))
			wantCodeNoFatal(t, err, protocol.CodeDurabilityFailed)
		})
	}
	wg.Wait()
	_, err := s.UpdateJournal("s", 1, JournalAccepted, nil, nil, nil)
	wantCode(t, err, protocol.CodeDurabilityFailed)
	if _, err := s.RecoverJournal(); err == nil {
		t.Error("RecoverJournal after Close succeeded")
	}
	if _, err := s.JournalEntry("s", 1); err == nil {
		t.Error("JournalEntry after Close succeeded")
	}
}

// wantCodeNoFatal is wantCode for goroutines other than the test's.
func wantCodeNoFatal(t *testing.T, err error, code string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Errorf("error %v, want code %s", err, code)
	}
}

// Recovery decodes large journals in parallel chunks and still reports the first bad entry.
func TestDecodeJournalRefsParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	s := &Store{path: "test.db"}
	session := []byte("s")
	const n = 4000
	refs := make([]journalRef, n)
	for i := range refs {
		e := testWake("s", i)
		e.FormatVersion, e.Seq, e.CreatedAt, e.UpdatedAt = JournalFormatVersion, uint64(i+1), t0, t0
		data, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		refs[i] = journalRef{session, seqKey(e.Seq), data}
	}
	entries, err := s.decodeJournalRefs(refs)
	if err != nil || len(entries) != n {
		t.Fatalf("decodeJournalRefs = %d entries, %v", len(entries), err)
	}
	for i, e := range entries {
		if e.Seq != uint64(i+1) || e.IdempotencyKey != fmt.Sprintf("idem-%d", i) {
			t.Fatalf("entry %d = %+v", i, e)
		}
	}
	for _, bad := range []int{3999, 2100, 1500, 1200} { // each one earlier, in another chunk or the same
		refs[bad].value = []byte("{")
		_, err := s.decodeJournalRefs(refs)
		pe := wantCode(t, err, protocol.CodeCorruptJournal)
		if want := fmt.Sprintf("entry %d of", bad+1); !strings.Contains(pe.Message, want) {
			t.Errorf("message %q does not name the first bad entry (%s)", pe.Message, want)
		}
	}
}
