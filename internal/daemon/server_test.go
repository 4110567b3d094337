package daemon

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// startInProcess runs a daemon inside the test, for cases that need a hook into dispatch.
func startInProcess(t *testing.T, cfg Config) *Daemon {
	t.Helper()
	root := daemontest.ShortDir(t)
	cfg.SocketPath = filepath.Join(root, "run", "d.sock")
	cfg.StateDir = filepath.Join(root, "state")
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return d
}

// holdGate holds commands of one operation in dispatch until released.
type holdGate struct {
	op      string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newGate(op string) *holdGate {
	return &holdGate{op: op, entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (g *holdGate) hook(cmd *protocol.Command) {
	if cmd.Operation != g.op {
		return
	}
	g.entered <- struct{}{}
	<-g.release
}

func (g *holdGate) open() { g.once.Do(func() { close(g.release) }) }

func (g *holdGate) waitEntered(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("command never reached dispatch")
		}
	}
}

func TestDuplicateRequestIDInFlight(t *testing.T) {
	g := newGate("status")
	d := startInProcess(t, Config{dispatchHook: g.hook})
	defer g.open()
	rc := dialRaw(t, d.cfg.SocketPath)
	rc.send(`{"protocolVersion":"2.0","requestId":"same","operation":"status","payload":{}}`)
	g.waitEntered(t, 1)
	rc.send(`{"protocolVersion":"2.0","requestId":"same","operation":"handshake","payload":{}}`)
	resp := rc.next()
	if errCode(t, resp) != protocol.CodeDuplicateRequestID || resp["requestId"] != "same" {
		t.Fatalf("duplicate in-flight id: %v", resp)
	}
	g.open()
	if resp := rc.next(); errCode(t, resp) != "" || resp["requestId"] != "same" {
		t.Fatalf("the first command's answer: %v", resp)
	}
	// Once answered, the id may be used again.
	rc.send(`{"protocolVersion":"2.0","requestId":"same","operation":"handshake","payload":{}}`)
	if resp := rc.next(); errCode(t, resp) != "" {
		t.Fatalf("reused id after its answer: %v", resp)
	}
}

func TestInFlightLimitAnswersConnectionBusy(t *testing.T) {
	g := newGate("status")
	limits := DefaultLimits
	limits.MaxInFlight = 2
	d := startInProcess(t, Config{dispatchHook: g.hook, Limits: limits})
	defer g.open()
	rc := dialRaw(t, d.cfg.SocketPath)
	rc.send(`{"protocolVersion":"2.0","requestId":"a","operation":"status","payload":{}}`,
		`{"protocolVersion":"2.0","requestId":"b","operation":"status","payload":{}}`)
	g.waitEntered(t, 2)
	rc.send(`{"protocolVersion":"2.0","requestId":"c","operation":"handshake","payload":{}}`)
	resp := rc.next()
	e, _ := resp["error"].(map[string]any)
	if errCode(t, resp) != protocol.CodeConnectionBusy || e["retryable"] != true || resp["requestId"] != "c" {
		t.Fatalf("over the in-flight limit: %v", resp)
	}
	g.open()
	rc.next()
	rc.next()
}

func TestOtherUsersAreRefused(t *testing.T) {
	other := 4242
	d := startInProcess(t, Config{peerUID: &other})
	rc := dialRaw(t, d.cfg.SocketPath)
	// The daemon may already have closed the connection; the write is allowed to fail.
	rc.nc.Write([]byte(`{"protocolVersion":"2.0","requestId":"a","operation":"handshake","payload":{}}` + "\n"))
	rc.expectEOF()
	host := d.hostSnapshot(false)
	if host.Metrics["connectionsRefusedPeer"] != 1 {
		t.Fatalf("refusal not counted: %v", host.Metrics)
	}
}

func TestShutdownAnswersCommandsInFlight(t *testing.T) {
	g := newGate("status")
	d := startInProcess(t, Config{dispatchHook: g.hook})
	rc := dialRaw(t, d.cfg.SocketPath)
	rc.send(`{"protocolVersion":"2.0","requestId":"slow","operation":"status","payload":{}}`)
	g.waitEntered(t, 1)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- d.Shutdown(ctx)
	}()
	g.open()
	if resp := rc.next(); resp["requestId"] != "slow" || errCode(t, resp) != "" {
		t.Fatalf("in-flight command at shutdown: %v", resp)
	}
	rc.expectEOF()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestShutdownDeadlineDropsStuckConnections(t *testing.T) {
	g := newGate("status")
	d := startInProcess(t, Config{dispatchHook: g.hook})
	rc := dialRaw(t, d.cfg.SocketPath)
	rc.send(`{"protocolVersion":"2.0","requestId":"stuck","operation":"status","payload":{}}`)
	g.waitEntered(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time at all
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(ctx) }()
	rc.expectEOF()
	g.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLimitsValidate(t *testing.T) {
	bad := []func(*Limits){
		func(l *Limits) { l.MaxConnections = 0 },
		func(l *Limits) { l.MaxInFlight = 0 },
		func(l *Limits) { l.MaxLineBytes = 100 },
		func(l *Limits) { l.MaxEventBytes = 100 },
		func(l *Limits) { l.MaxResponseBytes = l.MaxOutboundBytes + 1 },
		func(l *Limits) { l.MaxConnectionsPerPeer = 0 },
		func(l *Limits) { l.FirstLineTimeout = 0 },
		func(l *Limits) { l.LineTimeout = -time.Second },
		func(l *Limits) { l.MaxAttachments = l.MaxConnections },
		func(l *Limits) { l.MaxAttachments = -1 },
		func(l *Limits) { l.MaxAttachmentsPerSession = 0 },
		func(l *Limits) { l.ControlConnections = -1 },
		func(l *Limits) { l.ControlConnectionsPerPeer = 0 },
	}
	for i, mutate := range bad {
		l := DefaultLimits
		mutate(&l)
		if l.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, l)
		}
	}
	if err := DefaultLimits.Validate(); err != nil {
		t.Fatal(err)
	}
	// The attachment bounds default to half the connections, and never take the only one.
	for _, tc := range []struct{ conns, attachments, perSession, wantTotal, wantPer int }{
		{64, 0, 8, 32, 8}, {10, 0, 8, 5, 5}, {1, 0, 8, 1, 1}, {64, 63, 8, 63, 8},
	} {
		l := DefaultLimits
		l.MaxConnections, l.MaxAttachments, l.MaxAttachmentsPerSession = tc.conns, tc.attachments, tc.perSession
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", tc, err)
		}
		if total, per := l.Attachments(); total != tc.wantTotal || per != tc.wantPer {
			t.Errorf("%+v: attachments %d per session %d", tc, total, per)
		}
	}
}
