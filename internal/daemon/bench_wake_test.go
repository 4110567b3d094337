package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/session"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/transcript"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// BenchmarkWakeAdmission measures durable wake admission through airlockd: wakes with
// waitForTerminal:false, each answered only once its queued journal entry is committed with
// fsync, from 1 and from 64 concurrent clients (one session each). The model holds every call,
// so admitted wakes stay queued and only admission is measured:
//
//	go test -run '^$' -bench WakeAdmission -benchtime 4000x ./internal/daemon/
func BenchmarkWakeAdmission(b *testing.B) {
	llm := modeltest.New()
	never := make(chan struct{})
	llm.SetDefault(modeltest.Reply{Hold: never})
	defer llm.Close()
	defer close(never)
	root := daemontest.ShortDir(b)
	d, err := Start(Config{
		SocketPath: filepath.Join(root, "run", "d.sock"), StateDir: filepath.Join(root, "state"),
		Providers: map[string]session.Provider{"local": {Name: "local", BaseURL: llm.URL()}},
		Turns:     TurnLimits{MaxConcurrentTurns: 1, QueueDepth: 1 << 16},
		// 64 clients of this process, each idle between its wakes: the per-process share
		// is raised to 64 (benchLimits).
		Limits: benchLimits(64),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	waitReady(b, d)

	const sessions = 64
	cwd := b.TempDir()
	conns := make([]*client.Client, sessions)
	for i := range conns {
		c, err := client.Dial(context.Background(), d.cfg.SocketPath)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
		r, err := c.Call(context.Background(), client.Command{Operation: "open", SessionID: fmt.Sprint("s", i), Generation: ptr(1),
			Payload: map[string]any{"cwd": cwd, "session": map[string]any{"mode": "new"}, "model": map[string]any{"provider": "local", "id": "m"},
				"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none", "contextFiles": "none", "tools": "none"}}})
		if err := callErr(r, err); err != nil {
			b.Fatalf("open: %v", err)
		}
	}
	var seq atomic.Int64
	admit := func(clients, total int) float64 {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total / clients {
					k := seq.Add(1)
					r, err := conns[i].Call(context.Background(), client.Command{Operation: "wake", SessionID: fmt.Sprint("s", i), Generation: ptr(1),
						IdempotencyKey: fmt.Sprint("k", k), Payload: map[string]any{"prompt": "summarize the changes of the day in three sentences", "waitForTerminal": false}})
					if err := callErr(r, err); err != nil {
						b.Errorf("wake: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		return float64(total/clients*clients) / time.Since(start).Seconds()
	}
	b.ResetTimer()
	b.ReportMetric(admit(1, max(b.N/8, 100)), "admissions/s-1client")
	b.ReportMetric(admit(sessions, max(b.N, sessions)), "admissions/s-64clients")
}

func ptr(n int64) *int64 { return &n }

// BenchmarkRecovery measures a restart of airlockd over 4,096 sessions, each with a transcript
// to reopen, and 10,000 terminal journal entries: from Start until the recovery phase settles.
// The state is built once, directly through the store, then recovered b.N times:
//
//	go test -run '^$' -bench Recovery -benchtime 5x ./internal/daemon/
func BenchmarkRecovery(b *testing.B) {
	const sessions, entries = 4096, 10000
	root := daemontest.ShortDir(b)
	stateDir := filepath.Join(root, "state")
	buildRecoveryState(b, stateDir, sessions, entries)
	socket := filepath.Join(root, "run", "d.sock")
	b.ResetTimer()
	var worst time.Duration
	for range b.N {
		start := time.Now()
		d, err := Start(Config{SocketPath: socket, StateDir: stateDir, MaxSessions: sessions,
			Providers: map[string]session.Provider{"local": {Name: "local", BaseURL: "http://127.0.0.1:9/v1"}}})
		if err != nil {
			b.Fatal(err)
		}
		for p := d.sessions.Phase(); p == protocol.PhaseNotStarted || p == protocol.PhaseRecovering; p = d.sessions.Phase() {
			time.Sleep(200 * time.Microsecond)
		}
		took := time.Since(start)
		worst = max(worst, took)
		b.StopTimer()
		h := d.sessions.Host().Recovery
		if h.Phase != protocol.PhaseReady || h.RestoredSessions != sessions {
			b.Fatalf("recovery: %+v", h)
		}
		d.Shutdown(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/recovery")
	b.ReportMetric(float64(worst.Milliseconds()), "worst-ms")
}

// buildRecoveryState writes what a host with resident sessions and a history of finished
// wakes leaves behind: a catalog record, manifest and transcript per session, and terminal
// journal entries spread over them.
func buildRecoveryState(b *testing.B, dir string, sessions, entries int) {
	st, err := store.Open(dir, store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cwd := b.TempDir()
	now := time.Now().UTC()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprint("session-", i)
				tdir := filepath.Join(dir, "sessions", id)
				f, err := transcript.Create(tdir, now)
				if err != nil {
					b.Error(err)
					return
				}
				f.Append(transcript.Entry{Kind: "message", Role: "user", Content: "hello"},
					transcript.Entry{Kind: "message", Role: "assistant", Content: "hello to you"})
				ref := &protocol.ConversationRef{ID: f.Identity().ID, File: f.Identity().File}
				f.Close()
				pol := protocol.Policy{Cwd: cwd, Mode: protocol.ModeNew, Tools: protocol.ResourceNone, Model: &protocol.ModelRef{Provider: "local", ID: "m"}}
				rec := &protocol.CatalogRecord{SessionID: id, Generation: 1, Residency: protocol.Resident, State: protocol.StateIdle,
					ProtocolVersion: "2.0", PolicyDigest: pol.Digest(), Policy: pol, CreatedAt: now, UpdatedAt: now, LastUsedAt: now, Conversation: ref}
				if err := st.SaveSession(rec, &store.Manifest{ProtocolVersion: "2.0", SessionID: id, Generation: 1, Policy: pol,
					Conversation: ref, CreatedAt: now, UpdatedAt: now}); err != nil {
					b.Error(err)
					return
				}
				for k := i; k < entries; k += sessions {
					key := fmt.Sprint("k", k)
					e, err := st.AppendJournal(store.JournalEntry{SessionID: id, Generation: 1, IdempotencyKey: key, RequestID: key,
						TicketID: protocol.TicketID(id, key), Fingerprint: "f", State: store.JournalQueued, Prompt: "what changed today?"})
					if err == nil {
						_, err = st.UpdateJournal(id, e.Seq, store.JournalAccepted, nil, nil, nil)
					}
					if err == nil {
						_, err = st.UpdateJournal(id, e.Seq, store.JournalCompleted, []byte(`{"text":"nothing much"}`), nil, nil)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	for i := range sessions {
		work <- i
	}
	close(work)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	os.Chmod(dir, 0o700)
}
