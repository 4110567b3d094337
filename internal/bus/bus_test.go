package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/busport"
)

// With the child-node variables set, the test binary is a fabric node for a test in this
// package (cluster_test.go) to SIGKILL: it starts the node, says "ready" and runs until
// killed or until its stdin closes.
func TestMain(m *testing.M) {
	if path := os.Getenv("AIRLOCK_BUS_TEST_NODE"); path != "" {
		os.Exit(runChildNode(path, os.Getenv("AIRLOCK_BUS_TEST_STATE")))
	}
	goleak.VerifyTestMain(m)
}

func runChildNode(path, state string) int {
	fb, err := LoadFabric(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := StartServer(ServerConfig{StateDir: state, Fabric: fb})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = s.Close()
	return 0
}

// startServer starts an embedded server in a temporary state directory, closed at cleanup.
func startServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	s, err := StartServer(cfg)
	if err != nil {
		t.Fatalf("StartServer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dial connects to s (in process unless viaURL), closed at cleanup before the server.
func dial(t testing.TB, s *Server, viaURL bool) *Conn {
	t.Helper()
	cfg := DialConfig{Server: s, Name: "test"}
	if viaURL {
		cfg = DialConfig{URL: s.ClientURL(), Name: "test"}
	}
	c, err := Dial(cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestServerListensOnLoopbackOnlyAndKeepsItsStorePrivate(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, ServerConfig{StateDir: dir})
	u, err := url.Parse(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	if host != "127.0.0.1" || port == "0" || port == "4222" {
		t.Fatalf("ClientURL = %s, want 127.0.0.1 on a random port", s.ClientURL())
	}
	fi, err := os.Stat(filepath.Join(dir, "nats"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir: %v %v, want mode 0700", fi.Mode(), err)
	}

	for _, cfg := range []ServerConfig{
		{StateDir: t.TempDir(), Listen: "0.0.0.0:0"},
		{StateDir: t.TempDir(), Listen: "192.0.2.1:4222"},
		{StateDir: t.TempDir(), Listen: "localhost:0"},
		{StateDir: t.TempDir(), Listen: "127.0.0.1"},
		{StateDir: t.TempDir(), MaxPayload: 10},
		{},
	} {
		if _, err := StartServer(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("StartServer(%+v) = %v, want ErrConfig", cfg, err)
		}
	}

	open := t.TempDir()
	if err := os.Mkdir(filepath.Join(open, "nats"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(open, "nats"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := StartServer(ServerConfig{StateDir: open}); !errors.Is(err, ErrConfig) {
		t.Errorf("StartServer over a 0755 store = %v, want ErrConfig", err)
	}
}

func TestNoListenServesInProcessOnly(t *testing.T) {
	s := startServer(t, ServerConfig{NoListen: true})
	if s.ClientURL() != "" {
		t.Fatalf("ClientURL = %q, want none", s.ClientURL())
	}
	c := dial(t, s, false)
	echo(t, c, "echo.>")
	got, err := c.Request(ctxTimeout(t, 5*time.Second), "echo.x", []byte("hi"))
	if err != nil || string(got) != "hi" {
		t.Fatalf("Request = %q, %v", got, err)
	}
}

// echoHandler replies with the payload; Overloaded replies "busy".
type echoHandler struct {
	block   chan struct{} // when set, Serve waits for it (or ctx) first
	entered chan struct{} // when set, Serve sends on it first
}

func (h *echoHandler) Serve(ctx context.Context, _ string, p []byte) []byte {
	if h.entered != nil {
		h.entered <- struct{}{}
	}
	if h.block != nil {
		select {
		case <-h.block:
		case <-ctx.Done():
			return []byte("cancelled")
		}
	}
	return p
}

func (h *echoHandler) Overloaded(string, []byte) []byte { return []byte("busy") }

func echo(t testing.TB, c *Conn, subject string) *echoHandler {
	t.Helper()
	h := &echoHandler{}
	sub, err := c.Serve(subject, 4, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop() })
	return h
}

func TestRequestReplyAcrossConnectionsAndItsFailures(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, b := dial(t, s, false), dial(t, s, true)
	echo(t, a, "svc.a")

	got, err := b.Request(ctxTimeout(t, 5*time.Second), "svc.a", []byte("ping"))
	if err != nil || string(got) != "ping" {
		t.Fatalf("Request = %q, %v", got, err)
	}
	if _, err := b.Request(ctxTimeout(t, 5*time.Second), "svc.none", []byte("x")); !errors.Is(err, busport.ErrNoResponders) {
		t.Fatalf("no responders: %v", err)
	}
	if _, err := b.Request(ctxTimeout(t, 5*time.Second), "svc.a", make([]byte, DefaultMaxPayload+1)); !errors.Is(err, busport.ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, err := b.Request(context.Background(), "svc.a", nil); err == nil {
		t.Fatal("a request without a deadline was sent")
	}

	// A handler that never answers in time gives ErrTimeout.
	slow := &echoHandler{block: make(chan struct{})}
	sub, err := a.Serve("svc.slow", 1, slow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Request(ctxTimeout(t, 100*time.Millisecond), "svc.slow", []byte("x")); !errors.Is(err, busport.ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	close(slow.block)
	if err := sub.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(); err != nil {
		t.Fatal("second Stop:", err)
	}
	if _, err := b.Request(ctxTimeout(t, 5*time.Second), "svc.slow", nil); !errors.Is(err, busport.ErrNoResponders) {
		t.Fatalf("after Stop: %v", err)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Request(ctxTimeout(t, time.Second), "svc.a", nil); !errors.Is(err, busport.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestServeBoundsConcurrencyAndStopWaitsForHandlers(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, b := dial(t, s, false), dial(t, s, false)
	h := &echoHandler{block: make(chan struct{}), entered: make(chan struct{})}
	sub, err := a.Serve("svc.bounded", 2, h)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make(chan string, 2)
	for range 2 {
		wg.Go(func() {
			got, err := b.Request(ctxTimeout(t, 10*time.Second), "svc.bounded", []byte("ok"))
			if err != nil {
				results <- err.Error()
				return
			}
			results <- string(got)
		})
	}
	// Wait until both slots are taken, then a third request is answered by Overloaded.
	<-h.entered
	<-h.entered
	got, err := b.Request(ctxTimeout(t, 5*time.Second), "svc.bounded", []byte("third"))
	if err != nil || string(got) != "busy" {
		t.Fatalf("third request = %q, %v; want busy", got, err)
	}
	// Stop cancels the running handlers and waits for them; their replies still go out.
	if err := sub.Stop(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "cancelled" {
			t.Errorf("a running request ended with %q, want its handler's cancelled reply", r)
		}
	}
}

func TestBucketOperationsConflictsAndWatch(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, b := dial(t, s, false), dial(t, s, true)
	ctx := ctxTimeout(t, 20*time.Second)
	ka, err := a.Bucket(ctx, busport.BucketConfig{Name: "rooms", MaxValueBytes: 128})
	if err != nil {
		t.Fatal(err)
	}
	kb, err := b.Bucket(ctx, busport.BucketConfig{Name: "rooms", MaxValueBytes: 128})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Bucket(ctx, busport.BucketConfig{Name: "bad.name"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad bucket name: %v", err)
	}

	rev, err := ka.Create(ctx, "r1.roster", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kb.Create(ctx, "r1.roster", []byte("again")); !errors.Is(err, busport.ErrConflict) {
		t.Fatalf("second Create: %v", err)
	}
	if _, err := kb.Update(ctx, "r1.roster", []byte("v2"), rev); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Update(ctx, "r1.roster", []byte("stale"), rev); !errors.Is(err, busport.ErrConflict) {
		t.Fatalf("stale Update: %v", err)
	}
	if e, err := ka.Get(ctx, "r1.roster"); err != nil || string(e.Value) != "v2" {
		t.Fatalf("Get = %+v, %v", e, err)
	}
	if _, err := ka.Put(ctx, "r1.big", make([]byte, 129)); !errors.Is(err, busport.ErrTooLarge) {
		t.Fatalf("oversized value: %v", err)
	}
	if _, err := ka.Get(ctx, "r1.none"); !errors.Is(err, busport.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}

	var mu sync.Mutex
	var seen []busport.Entry
	changed := make(chan struct{}, 16)
	w, err := kb.Watch(ctx, "r1.>", func(e busport.Entry) {
		mu.Lock()
		seen = append(seen, e)
		mu.Unlock()
		changed <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	// The entry present at the start was delivered before Watch returned.
	mu.Lock()
	if len(seen) != 1 || seen[0].Key != "r1.roster" || string(seen[0].Value) != "v2" {
		t.Fatalf("initial watch entries = %+v", seen)
	}
	mu.Unlock()
	<-changed
	if _, err := ka.Put(ctx, "r1.pub", []byte("p")); err != nil {
		t.Fatal(err)
	}
	<-changed
	if err := ka.Delete(ctx, "r1.pub"); err != nil {
		t.Fatal(err)
	}
	<-changed
	if _, err := ka.Put(ctx, "r2.other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[1].Key != "r1.pub" || !bytes.Equal(seen[1].Value, []byte("p")) || !seen[2].Deleted {
		t.Fatalf("watched entries = %+v", seen)
	}
}

func TestBucketTTLExpiresEntriesAndWatchersSeeIt(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := dial(t, s, false)
	ctx := ctxTimeout(t, 30*time.Second)
	kv, err := c.Bucket(ctx, busport.BucketConfig{Name: "presence", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	gone := make(chan busport.Entry, 4)
	w, err := kv.Watch(ctx, ">", func(e busport.Entry) {
		if e.Deleted {
			gone <- e
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := kv.Put(ctx, "r1.host", []byte("here")); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-gone:
		if e.Key != "r1.host" {
			t.Fatalf("expired %q", e.Key)
		}
	case <-ctx.Done():
		t.Fatal("the entry did not expire")
	}
	if _, err := kv.Get(ctx, "r1.host"); !errors.Is(err, busport.ErrNotFound) {
		t.Fatalf("Get after expiry: %v", err)
	}
}

func TestCloseStopsServesAndWatches(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c, err := Dial(DialConfig{Server: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	if _, err := c.Serve("svc.x", 1, &echoHandler{}); err != nil {
		t.Fatal(err)
	}
	kv, err := c.Bucket(ctx, busport.BucketConfig{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Watch(ctx, ">", func(busport.Entry) {}); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := c.Serve("svc.y", 1, &echoHandler{}); err == nil {
		t.Fatal("Serve after Close succeeded")
	}
}

// headerEcho replies with the request's header and data, and a "served" field, from a
// goroutine of its own; overloaded, it replies with a "busy" field alone.
type headerEcho struct{ block, entered chan struct{} }

func (h headerEcho) ServeMsg(ctx context.Context, _ string, m busport.Msg, respond func(busport.Msg)) {
	go func() {
		if h.entered != nil {
			h.entered <- struct{}{}
		}
		if h.block != nil {
			select {
			case <-h.block:
			case <-ctx.Done():
			}
		}
		out := map[string][]string{"served": {"1"}}
		for k, vs := range m.Header {
			out[k] = vs
		}
		respond(busport.Msg{Header: out, Data: m.Data})
		respond(busport.Msg{Data: []byte("a second answer is not sent")})
	}()
}

func (headerEcho) OverloadedMsg(string, busport.Msg) busport.Msg {
	return busport.Msg{Header: map[string][]string{"busy": {"1"}}}
}

func TestRequestMsgCarriesHeaderFields(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, b := dial(t, s, false), dial(t, s, true)
	sub, err := a.ServeMsg("svc.h", 1, headerEcho{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	got, err := b.RequestMsg(ctxTimeout(t, 5*time.Second), "svc.h", busport.Msg{Header: map[string][]string{"room": {"r1"}, "Room": {"x", "y"}}, Data: []byte("args")})
	if err != nil || string(got.Data) != "args" || !slices.Equal(got.Header["room"], []string{"r1"}) ||
		!slices.Equal(got.Header["Room"], []string{"x", "y"}) || !slices.Equal(got.Header["served"], []string{"1"}) {
		t.Fatalf("RequestMsg = %+v, %v", got, err)
	}
	// A header alone is a reply; data alone is a request.
	if got, err := b.RequestMsg(ctxTimeout(t, 5*time.Second), "svc.h", busport.Msg{Data: []byte("x")}); err != nil || string(got.Data) != "x" || len(got.Header) != 1 {
		t.Fatalf("RequestMsg without a header = %+v, %v", got, err)
	}
	big := busport.Msg{Header: map[string][]string{"k": {strings.Repeat("v", DefaultMaxPayload/2)}}, Data: make([]byte, DefaultMaxPayload/2)}
	if _, err := b.RequestMsg(ctxTimeout(t, 5*time.Second), "svc.h", big); !errors.Is(err, busport.ErrTooLarge) {
		t.Fatalf("header and data over the limit: %v", err)
	}
	if _, err := b.RequestMsg(ctxTimeout(t, 5*time.Second), "svc.none", busport.Msg{Data: []byte("x")}); !errors.Is(err, busport.ErrNoResponders) {
		t.Fatalf("no responders: %v", err)
	}

	// The one slot taken, a second request is answered by OverloadedMsg.
	block, entered := make(chan struct{}), make(chan struct{})
	slow, err := a.ServeMsg("svc.slow", 1, headerEcho{block: block, entered: entered})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := b.RequestMsg(ctxTimeout(t, 10*time.Second), "svc.slow", busport.Msg{Data: []byte("1")})
		first <- err
	}()
	<-entered
	if busy, err := b.RequestMsg(ctxTimeout(t, 5*time.Second), "svc.slow", busport.Msg{Data: []byte("2")}); err != nil || busy.Header["busy"] == nil || len(busy.Data) != 0 {
		t.Fatalf("overloaded reply = %+v, %v", busy, err)
	}
	close(block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := slow.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestStartRequestMsgEndsOnceWithTheReplyOrItsFailure(t *testing.T) {
	s := startServer(t, ServerConfig{})
	a, b := dial(t, s, false), dial(t, s, true)
	sub, err := a.ServeMsg("svc.h", 32, headerEcho{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	block := make(chan struct{})
	slow, err := a.ServeMsg("svc.slow", 4, headerEcho{block: block})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		m   busport.Msg
		err error
	}
	start := func(ctx context.Context, subject string, m busport.Msg) chan answer {
		ch := make(chan answer, 2) // room for a second answer, which must never come
		b.StartRequestMsg(ctx, subject, m, func(m busport.Msg, err error) { ch <- answer{m, err} })
		return ch
	}
	once := func(ch chan answer) answer {
		t.Helper()
		got := <-ch
		time.Sleep(10 * time.Millisecond)
		if len(ch) != 0 {
			t.Fatal("done was called twice")
		}
		return got
	}
	if got := once(start(ctxTimeout(t, 5*time.Second), "svc.h", busport.Msg{Header: map[string][]string{"k": {"v"}}, Data: []byte("x")})); got.err != nil ||
		string(got.m.Data) != "x" || !slices.Equal(got.m.Header["k"], []string{"v"}) {
		t.Fatalf("reply = %+v", got)
	}
	// Many at once, each gets its own reply.
	var chans []chan answer
	for i := range 20 {
		chans = append(chans, start(ctxTimeout(t, 5*time.Second), "svc.h", busport.Msg{Data: []byte{byte('a' + i)}}))
	}
	for i, ch := range chans {
		if got := <-ch; got.err != nil || string(got.m.Data) != string(rune('a'+i)) {
			t.Fatalf("reply %d = %+v", i, got)
		}
	}
	if got := once(start(ctxTimeout(t, 5*time.Second), "svc.none", busport.Msg{Data: []byte("x")})); !errors.Is(got.err, busport.ErrNoResponders) {
		t.Fatalf("no responders: %+v", got)
	}
	if got := once(start(ctxTimeout(t, 100*time.Millisecond), "svc.slow", busport.Msg{Data: []byte("x")})); !errors.Is(got.err, busport.ErrTimeout) {
		t.Fatalf("timeout: %+v", got)
	}
	if got := once(start(ctxTimeout(t, 5*time.Second), "svc.h", busport.Msg{Data: make([]byte, DefaultMaxPayload+1)})); !errors.Is(got.err, busport.ErrTooLarge) {
		t.Fatalf("too large: %+v", got)
	}
	if got := once(start(context.Background(), "svc.h", busport.Msg{Data: []byte("x")})); got.err == nil {
		t.Fatal("a request without a deadline was sent")
	}
	close(block)
	if err := slow.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := once(start(ctxTimeout(t, time.Second), "svc.h", busport.Msg{Data: []byte("x")})); !errors.Is(got.err, busport.ErrClosed) {
		t.Fatalf("after Close: %+v", got)
	}
}

// TestBucketWriteWithoutItsStreamFindsNoResponders: a write that no server's stream takes
// (here the stream is gone; in a cluster, its replicas are electing a leader) is
// busport.ErrNoResponders, which the room service retries on a fabric, and not a bare
// error it gives up on.
func TestBucketWriteWithoutItsStreamFindsNoResponders(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := dial(t, s, false)
	ctx := ctxTimeout(t, 20*time.Second)
	kv, err := c.Bucket(ctx, busport.BucketConfig{Name: "gone", MaxValueBytes: 128})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := c.js.DeleteStream(ctx, "KV_gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v2")); !errors.Is(err, busport.ErrNoResponders) {
		t.Fatalf("Put without its stream: %v, want %v", err, busport.ErrNoResponders)
	}
}

// A connection whose server went away is closed at once, without an error: its
// subscriptions have no route to withdraw, so Stop does not flush (a flush begun while the
// connection reconnects waits its whole connectTimeout, 5 s a subscription), and a drain of a
// reconnecting connection would fail (nats: connection reconnecting), so Close does not try.
func TestCloseOfALostConnectionDoesNotWaitForItsServer(t *testing.T) {
	s, err := StartServer(ServerConfig{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(DialConfig{URL: s.ClientURL(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"svc.a", "svc.b", "svc.c"} {
		if _, err := c.Serve(subject, 1, &echoHandler{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the connection never saw its server go")
	}
	start := time.Now()
	if err := c.Close(); err != nil {
		t.Fatalf("Close of a lost connection: %v", err)
	}
	// Each wait it no longer makes is connectTimeout or drainTimeout: far above this bound.
	if d := time.Since(start); d >= connectTimeout {
		t.Fatalf("Close took %s: it waited for the server", d)
	}
}

// Lost's channel is closed when the connection loses its server, and a new, open one is
// handed out once it is back; the one of the lost spell stays closed.
func TestLostFollowsTheConnection(t *testing.T) {
	dir := t.TempDir()
	s, err := StartServer(ServerConfig{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(s.ClientURL(), "nats://")
	back := make(chan struct{}, 1)
	c, err := Dial(DialConfig{URL: s.ClientURL(), Name: "test", Reconnected: func() { back <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	up := c.Lost()
	select {
	case <-up:
		t.Fatal("Lost is closed on a connection that is up")
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-up:
	case <-time.After(30 * time.Second):
		t.Fatal("Lost was not closed when the server went")
	}
	if c.Connected() {
		t.Fatal("Connected with Lost closed")
	}
	s2, err := StartServer(ServerConfig{StateDir: dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	select {
	case <-back:
	case <-time.After(30 * time.Second):
		t.Fatal("the connection did not come back")
	}
	select {
	case <-c.Lost():
		t.Fatal("Lost is closed after the reconnect")
	default:
	}
	select {
	case <-up:
	default:
		t.Fatal("the lost spell's channel opened again")
	}
	c.Close()
	select {
	case <-c.Lost():
	default:
		t.Fatal("Lost is open on a closed connection")
	}
}
