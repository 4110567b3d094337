package toolclient

import (
	"bytes"
	"context"
	"encoding/json"

	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// The descriptor fixtures are the wire package's (tooladapter's fixtures_test.go), so that both
// packages' tests speak of one binding.

// testHandle is the capability handle of every test descriptor; tests scan errors and logs for it.
const testHandle = "cap_TEST-handle_0123456789abcdefghijklmnopqrstuvwxyz"

// testTimeout bounds every wait in these tests: generous, because a -race build on a loaded
// two-core machine is slow, and never an assertion by itself.
const testTimeout = 10 * time.Second

// shortRoot makes a private directory under /tmp, so that socket paths fit sun_path whatever
// TMPDIR is.
func shortRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ta-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func baseLimits() map[string]any {
	return map[string]any{
		"maxRequestBytes": 1048576, "maxResponseBytes": 1048576,
		"maxConcurrentRequests": 4, "maxQueuedRequests": 16, "requestTimeoutMs": 30000,
		"maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000,
	}
}

// descriptorMap returns a valid descriptor as a map, bound to testBinding.
func descriptorMap(sock string) map[string]any {
	return map[string]any{
		"protocolVersion": "1.0",
		"adapterId":       "owner-filesystem",
		"adapterVersion":  "1.2.0",
		"endpoint":        map[string]any{"transport": "unix", "path": sock},
		"binding": map[string]any{
			"hostInstanceId": "host-019f", "sessionId": "agent-a", "generation": 2,
			"capabilityHandle": testHandle,
		},
		"operations": []any{"fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"},
		"limits":     baseLimits(),
	}
}

var testBinding = tooladapter.Binding{HostInstanceID: "host-019f", SessionID: "agent-a", Generation: 2}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustDescriptor(t testing.TB, m map[string]any) *tooladapter.Descriptor {
	t.Helper()
	b := m["binding"].(map[string]any)
	want := tooladapter.Binding{HostInstanceID: b["hostInstanceId"].(string), SessionID: b["sessionId"].(string), Generation: int64(b["generation"].(int))}
	d, e := tooladapter.ParseDescriptor(mustJSON(t, m), want)
	if e != nil {
		t.Fatalf("ParseDescriptor: %v", e)
	}
	return d
}

// hook scripts the adapter: it sees every frame the daemon sends on one connection. Returning
// without sending anything leaves the frame unanswered.
type hook func(ac *adapterConn, f *tooladapter.Frame)

// adapter is a scripted tool adapter on a real Unix socket.
type adapter struct {
	t    testing.TB
	sock string
	ln   *net.UnixListener
	hook hook
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns []*adapterConn
	ch    chan *adapterConn // new connections
}

// adapterConn is one daemon connection the adapter accepted.
type adapterConn struct {
	a   *adapter
	nc  net.Conn
	wmu sync.Mutex

	mu     sync.Mutex
	frames []*tooladapter.Frame
	bind   *tooladapter.Frame
	seen   chan *tooladapter.Frame // every frame, for tests that wait on one
	closed chan struct{}
}

func newAdapter(t testing.TB, h hook) *adapter {
	t.Helper()
	dir := shortRoot(t)
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = answerAll
	}
	a := &adapter{t: t, sock: sock, ln: ln, hook: h, ch: make(chan *adapterConn, 16)}
	a.wg.Add(1)
	go a.serve()
	t.Cleanup(a.close)
	return a
}

func (a *adapter) serve() {
	defer a.wg.Done()
	for {
		nc, err := a.ln.Accept()
		if err != nil {
			return
		}
		ac := &adapterConn{a: a, nc: nc, seen: make(chan *tooladapter.Frame, 1024), closed: make(chan struct{})}
		a.mu.Lock()
		a.conns = append(a.conns, ac)
		a.mu.Unlock()
		select {
		case a.ch <- ac:
		default:
		}
		a.wg.Add(1)
		go ac.read()
	}
}

func (a *adapter) close() {
	_ = a.ln.Close()
	a.mu.Lock()
	for _, ac := range a.conns {
		_ = ac.nc.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (ac *adapterConn) read() {
	defer ac.a.wg.Done()
	defer close(ac.closed)
	rd := ndjson.NewReader(ac.nc, 4<<20)
	for {
		line, err := rd.Next()
		if err != nil {
			return
		}
		f, e := tooladapter.DecodeFrame(line)
		if e != nil {
			ac.a.t.Errorf("adapter: daemon sent an invalid frame: %v: %s", e, line)
			return
		}
		if f.Kind != tooladapter.KindBind && bytes.Contains(line, []byte(testHandle)) {
			ac.a.t.Errorf("adapter: daemon sent the handle in a %s frame", f.Kind)
		}
		ac.mu.Lock()
		ac.frames = append(ac.frames, f)
		if f.Kind == tooladapter.KindBind {
			ac.bind = f
		}
		ac.mu.Unlock()
		select {
		case ac.seen <- f:
		default:
		}
		ac.a.hook(ac, f)
	}
}

// send writes one raw line (LF added).
func (ac *adapterConn) send(line string) {
	ac.wmu.Lock()
	defer ac.wmu.Unlock()
	_, _ = ac.nc.Write([]byte(line + "\n"))
}

// marshalFrame encodes f as the adapter's side sends it: validated, as a conforming adapter's
// frames are. Tests that send a malformed frame write its line with send.
func marshalFrame(f *tooladapter.Frame) ([]byte, error) {
	b, e := tooladapter.EncodeFrame(f, 0)
	if e != nil {
		return nil, e
	}
	return b, nil
}

// sendFrame encodes f and writes it.
func (ac *adapterConn) sendFrame(f *tooladapter.Frame) {
	b, err := marshalFrame(f)
	if err != nil {
		ac.a.t.Errorf("adapter: %v", err)
		return
	}
	ac.wmu.Lock()
	defer ac.wmu.Unlock()
	_, _ = ac.nc.Write(b)
}

// received returns the frames of a kind received so far.
func (ac *adapterConn) received(k tooladapter.Kind) []*tooladapter.Frame {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	var out []*tooladapter.Frame
	for _, f := range ac.frames {
		if f.Kind == k {
			out = append(out, f)
		}
	}
	return out
}

// waitFor blocks until a frame of kind k arrives and returns it.
func (ac *adapterConn) waitFor(t testing.TB, k tooladapter.Kind) *tooladapter.Frame {
	t.Helper()
	timer := time.NewTimer(testTimeout)
	defer timer.Stop()
	for {
		select {
		case f := <-ac.seen:
			if f.Kind == k {
				return f
			}
		case <-ac.closed:
			// Frames read before the close are still in seen.
			for {
				select {
				case f := <-ac.seen:
					if f.Kind == k {
						return f
					}
					continue
				default:
				}
				break
			}
			t.Fatalf("adapter connection closed while waiting for %s", k)
		case <-timer.C:
			t.Fatalf("no %s frame within %v", k, testTimeout)
		}
	}
}

// next returns the next accepted connection.
func (a *adapter) next(t testing.TB) *adapterConn {
	t.Helper()
	select {
	case ac := <-a.ch:
		return ac
	case <-time.After(testTimeout):
		t.Fatal("no connection")
		return nil
	}
}

// reply builds a frame of kind k answering f with f's identity.
func reply(f *tooladapter.Frame, k tooladapter.Kind) *tooladapter.Frame {
	return &tooladapter.Frame{Kind: k, Identity: f.Identity, RequestID: f.RequestID, IdempotencyKey: f.IdempotencyKey, Operation: f.Operation}
}

func boundFor(f *tooladapter.Frame) *tooladapter.Frame {
	return &tooladapter.Frame{Kind: tooladapter.KindBound, Identity: f.Identity, Operations: f.Operations, Limits: f.Limits}
}

// resultData returns valid data for op; the fs.stat size carries n so callers can correlate.
func resultData(op string, n int) json.RawMessage {
	digest := strings.Repeat("ab", 32)
	switch op {
	case tooladapter.OpList:
		return json.RawMessage(`{"entries":[{"name":"a.txt","type":"file","size":1}],"truncated":false}`)
	case tooladapter.OpStat:
		return json.RawMessage(fmt.Sprintf(`{"type":"file","size":%d,"modifiedAt":"2026-01-02T03:04:05Z"}`, n))
	case tooladapter.OpRead:
		return json.RawMessage(`{"content":"hello","bytesRead":5,"eof":true}`)
	case tooladapter.OpSearch:
		return json.RawMessage(`{"matches":[{"path":"src/a.go","line":1,"column":2,"text":"x"}],"truncated":false}`)
	case tooladapter.OpWrite:
		return json.RawMessage(`{"created":true,"bytesWritten":5,"digest":"` + digest + `"}`)
	case tooladapter.OpEdit:
		return json.RawMessage(`{"replacements":1,"digest":"` + digest + `"}`)
	}
	return nil
}

// ok answers an invoke successfully.
func ok(f *tooladapter.Frame, data json.RawMessage) *tooladapter.Frame {
	r := reply(f, tooladapter.KindResult)
	r.OK, r.Data = true, data
	return r
}

// answerAll binds and answers every invoke at once; fs.stat of "n<k>" reports size k.
func answerAll(ac *adapterConn, f *tooladapter.Frame) {
	switch f.Kind {
	case tooladapter.KindBind:
		ac.sendFrame(boundFor(f))
	case tooladapter.KindInvoke:
		ac.sendFrame(ok(f, resultData(f.Operation, sizeOf(f))))
	}
}

// bindOnly binds and leaves every invoke unanswered.
func bindOnly(ac *adapterConn, f *tooladapter.Frame) {
	if f.Kind == tooladapter.KindBind {
		ac.sendFrame(boundFor(f))
	}
}

func sizeOf(f *tooladapter.Frame) int {
	var p struct {
		Path string `json:"path"`
	}
	_ = json.Unmarshal(f.Payload, &p)
	var n int
	_, _ = fmt.Sscanf(p.Path, "n%d", &n)
	return n
}

func statReq(n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"path":"n%d"}`, n))
}

// connect parses m, connects to a and returns the connection and the adapter's side of it.
func connect(t testing.TB, a *adapter, m map[string]any, opts Options) (*Conn, *adapterConn) {
	t.Helper()
	m["endpoint"].(map[string]any)["path"] = a.sock
	d := mustDescriptor(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, e := Connect(ctx, d, opts)
	if e != nil {
		t.Fatalf("Connect: %v", e)
	}
	t.Cleanup(c.Close)
	return c, a.next(t)
}

// wantCode fails the test unless e has code.
func wantCode(t testing.TB, e *protocol.Error, code string) {
	t.Helper()
	if e == nil {
		t.Fatalf("got no error, want %s", code)
	}
	if e.Code != code {
		t.Fatalf("got %v (details %v), want %s", e, e.Details, code)
	}
}

func wantIndeterminate(t testing.TB, e *protocol.Error, want bool) {
	t.Helper()
	if got, _ := e.Details[tooladapter.DetailIndeterminate].(bool); got != want {
		t.Fatalf("%s: indeterminate = %v, want %v", e.Code, got, want)
	}
}

// eventually polls cond until it holds or testTimeout passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// secretFree fails the test if s contains the handle or the socket path.
func secretFree(t testing.TB, what, s, sock string) {
	t.Helper()
	if strings.Contains(s, testHandle) {
		t.Errorf("%s contains the capability handle: %s", what, s)
	}
	if sock != "" && strings.Contains(s, sock) {
		t.Errorf("%s contains the socket path: %s", what, s)
	}
}

// errorTexts renders e every way a caller might.
func errorTexts(e *protocol.Error) string {
	if e == nil {
		return ""
	}
	b, _ := json.Marshal(e)
	return e.Error() + "\n" + fmt.Sprintf("%v %+v %#v", e, e, e) + "\n" + string(b)
}

// logBuffer is a concurrency-safe buffer for a captured slog handler.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func captureLogger() (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}
