package bus

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// lockedBuffer is a log's output that a test reads while the server writes it.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // when set, gets a token after each write (dropped when one waits)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		select {
		case b.written <- struct{}{}:
		default:
		}
	}
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestNATSLogLevelsAndBound: the server's errors and warnings reach the log at their levels
// (notices at debug, debug and trace lines never), at most natsLogBurst a window, and the
// lines dropped are counted once the window ends.
func TestNATSLogLevelsAndBound(t *testing.T) {
	var out lockedBuffer
	l := newNATSLog(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	now := time.Unix(1_800_000_000, 0)
	l.now = func() time.Time { return now }
	l.Errorf("route %s refused", "b")
	l.Warnf("slow consumer %d", 7)
	l.Noticef("server ready")
	l.Debugf("debug %d", 1)
	l.Tracef("trace %d", 1)
	l.Fatalf("cannot listen")
	text := out.String()
	for _, want := range []string{"level=ERROR msg=\"route b refused\" component=nats", "level=WARN msg=\"slow consumer 7\" component=nats", "level=ERROR msg=\"cannot listen\""} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "server ready") || strings.Contains(text, "debug 1") || strings.Contains(text, "trace 1") {
		t.Errorf("a notice, debug or trace line at info:\n%s", text)
	}
	for i := range 100 {
		l.Errorf("handshake %d failed", i)
	}
	if n := strings.Count(out.String(), "\n"); n != natsLogBurst {
		t.Fatalf("%d lines in a window, want %d:\n%s", n, natsLogBurst, out.String())
	}
	now = now.Add(natsLogWindow)
	l.Errorf("after the window")
	text = out.String()
	if !strings.Contains(text, "msg=\"embedded bus log lines suppressed\" component=nats lines=83 window=1m0s") || !strings.Contains(text, "after the window") {
		t.Fatalf("after the window:\n%s", text)
	}
}

// TestServerLogsRefusedConnections: an embedded server given a Logger reports a connection it
// refused (here one without credentials) in that log, as an error of component nats.
func TestServerLogsRefusedConnections(t *testing.T) {
	kp, _, err := LoadOrCreateSeed(t.TempDir() + "/bus.nk")
	if err != nil {
		t.Fatal(err)
	}
	out := lockedBuffer{written: make(chan struct{}, 1)}
	s, err := StartServer(ServerConfig{StateDir: t.TempDir(), Host: &LocalHost{ID: strings.Repeat("a", 64), Key: kp},
		Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if nc, err := nats.Connect(s.ClientURL(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	}
	timeout := time.After(10 * time.Second)
	for !strings.Contains(out.String(), "level=ERROR") || !strings.Contains(out.String(), "authentication error") {
		select {
		case <-out.written:
		case <-timeout:
			t.Fatalf("the refused connection is not in the log:\n%s", out.String())
		}
	}
	if !strings.Contains(out.String(), "component=nats") {
		t.Fatalf("the line does not name its component:\n%s", out.String())
	}
}
