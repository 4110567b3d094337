package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/mcp"
)

func TestMain(m *testing.M) {
	if runStandIn() { // the test binary started as make bench-mcp's stand-in server
		os.Exit(0)
	}
	goleak.VerifyTestMain(daemontest.Main(m))
}

// env is a real airlockd with a session whose grant is served by a real airlock-fs.
type env struct {
	d    *daemontest.Daemon
	c    *client.Client
	host string
	root string // the grant root and the session's cwd
}

func call(t testing.TB, c *client.Client, cmd client.Command) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Call(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Operation, err)
	}
	return r
}

func gen(n int64) *int64 { return &n }

func startEnv(t testing.TB) *env {
	t.Helper()
	return startEnvWith(t, daemontest.Options{})
}

// startEnvWith is startEnv with a daemon started with opts.
func startEnvWith(t testing.TB, opts daemontest.Options) *env {
	t.Helper()
	d := daemontest.Start(t, opts)
	c := d.Dial()
	t.Cleanup(func() { c.Close() })
	e := &env{d: d, c: c, host: call(t, c, client.Command{Operation: "handshake"}).HostInstanceID}
	e.root = filepath.Join(daemontest.ShortDir(t), "work")
	if err := os.Mkdir(e.root, 0o700); err != nil {
		t.Fatal(err)
	}
	return e
}

// fsService is a running airlock-fs.
type fsService struct {
	bin, socket, admin string
	pid                int
}

func startFS(t testing.TB) *fsService {
	t.Helper()
	dir := daemontest.ShortDir(t)
	p := &fsService{bin: daemontest.Binary(t, "airlock-fs"), socket: filepath.Join(dir, "fs.sock"), admin: filepath.Join(dir, "admin.sock")}
	cmd := exec.Command(p.bin, "serve", "--socket", p.socket, "--admin-socket", p.admin)
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("airlock-fs stderr:\n%s", stderr.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; {
		if exec.Command(p.bin, "grants", "--admin-socket", p.admin).Run() == nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock-fs did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grant mints a grant of root for session/generation and returns its descriptor.
func (p *fsService) grant(t testing.TB, host, root, session string, generation int64, ops string, extra ...string) json.RawMessage {
	t.Helper()
	args := append([]string{"grant", "--admin-socket", p.admin, "--root", root, "--host-instance", host,
		"--session", session, "--generation", itoa(generation), "--operations", ops}, extra...)
	out, err := exec.Command(p.bin, args...).Output()
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	return json.RawMessage(out)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// open opens session generation 1 with cwd and a tool descriptor, in memory.
func (e *env) open(t testing.TB, session, cwd string, desc json.RawMessage) {
	t.Helper()
	e.openMode(t, session, cwd, desc, "memory")
}

// openMode opens session generation 1 with cwd, a tool descriptor and a session mode ("new"
// keeps a journal, so that a restarted daemon recovers the session).
func (e *env) openMode(t testing.TB, session, cwd string, desc json.RawMessage, mode string) {
	t.Helper()
	p := map[string]any{
		"cwd":     cwd,
		"session": map[string]any{"mode": mode},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": desc}},
	}
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: session, Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
}

// registerLamp registers the go-lamp example adapter as "lamp".
func (e *env) registerLamp(t *testing.T) {
	t.Helper()
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	for deadline := time.Now().Add(20 * time.Second); ; {
		r := call(t, e.c, client.Command{Operation: "registerAdapter", Payload: map[string]any{"name": "lamp", "command": lamp}})
		if r.OK {
			return
		}
		if !r.Error.Retryable || time.Now().After(deadline) {
			t.Fatalf("registerAdapter: %v", r.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// connect starts a bridge and an in-process go-sdk client connected to it.
type conn struct {
	b       *mcp.Bridge
	cs      *sdk.ClientSession
	mu      sync.Mutex
	changed int
	notes   chan struct{}
	prog    []*sdk.ProgressNotificationParams
}

func (e *env) connect(t testing.TB, cfg mcp.Config) *conn {
	t.Helper()
	cfg.Socket = e.d.Socket
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour // tests refresh explicitly
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mcp.New(ctx, cfg)
	if err != nil {
		t.Fatalf("mcp.New: %v", err)
	}
	cn := &conn{b: b, notes: make(chan struct{}, 16)}
	st, ct := sdk.NewInMemoryTransports()
	served := make(chan struct{})
	sctx, stop := context.WithCancel(context.Background())
	go func() { defer close(served); b.Serve(sctx, st) }()
	cl := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			cn.mu.Lock()
			cn.changed++
			cn.mu.Unlock()
			cn.notes <- struct{}{}
		},
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			cn.mu.Lock()
			cn.prog = append(cn.prog, r.Params)
			cn.mu.Unlock()
		},
	})
	cs, err := cl.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	cn.cs = cs
	t.Cleanup(func() {
		cs.Close()
		stop()
		<-served
		b.Close()
	})
	return cn
}

func (cn *conn) tools(t *testing.T) map[string]*sdk.Tool {
	t.Helper()
	res, err := cn.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*sdk.Tool{}
	for _, tl := range res.Tools {
		out[tl.Name] = tl
	}
	return out
}

func (cn *conn) call(t testing.TB, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cn.cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// wireError is airlock's error as an error result's _meta carries it.
type wireError struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Retryable bool           `json:"retryable"`
	Details   map[string]any `json:"details"`
	Hint      string         `json:"hint"`
}

// airlockError returns the error of an isError result, which must carry it in
// _meta[mcp.MetaError] and must not carry structuredContent (that is the success schema's).
func airlockError(t *testing.T, r *sdk.CallToolResult) wireError {
	t.Helper()
	if r.StructuredContent != nil {
		t.Fatalf("an error result carries structuredContent: %v", r.StructuredContent)
	}
	var e wireError
	b, _ := json.Marshal(r.Meta[mcp.MetaError])
	if json.Unmarshal(b, &e) != nil || e.Code == "" {
		t.Fatalf("error result without a code: %s", b)
	}
	return e
}

// errorCode returns the airlock code of an isError result, or "".
func errorCode(t *testing.T, r *sdk.CallToolResult) string {
	t.Helper()
	if !r.IsError {
		return ""
	}
	return airlockError(t, r).Code
}

func errorDetails(t *testing.T, r *sdk.CallToolResult) map[string]any {
	t.Helper()
	if !r.IsError {
		return nil
	}
	return airlockError(t, r).Details
}

func structured(t *testing.T, r *sdk.CallToolResult) map[string]any {
	t.Helper()
	if r.IsError {
		t.Fatalf("unexpected error result: %v", text(r))
	}
	b, _ := json.Marshal(r.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	return m
}

func text(r *sdk.CallToolResult) string {
	var sb strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	return sb.String()
}

// scripted is a host tool adapter outside our boundary, scripted by the test: it binds any
// handle, holds every invoke until released, and records the frames it reads.
type scripted struct {
	socket string
	ln     net.Listener
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   []net.Conn
	frames  []map[string]any
	release chan struct{}
	once    sync.Once
}

// unblock lets every held invoke answer.
func (a *scripted) unblock() { a.once.Do(func() { close(a.release) }) }

func startScripted(t *testing.T) *scripted {
	t.Helper()
	a := &scripted{socket: filepath.Join(daemontest.ShortDir(t), "s.sock"), release: make(chan struct{})}
	ln, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(a.socket, 0o600)
	a.ln = ln
	a.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
			a.wg.Go(func() { a.serve(c) })
		}
	})
	t.Cleanup(func() {
		a.unblock()
		ln.Close()
		a.mu.Lock()
		for _, c := range a.conns {
			c.Close()
		}
		a.mu.Unlock()
		a.wg.Wait()
	})
	return a
}

func (a *scripted) serve(c net.Conn) {
	defer c.Close()
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	write := func(m map[string]any) {
		b, _ := json.Marshal(m)
		wmu.Lock()
		c.Write(append(b, '\n'))
		wmu.Unlock()
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var f map[string]any
		if json.Unmarshal(sc.Bytes(), &f) != nil {
			return
		}
		a.mu.Lock()
		a.frames = append(a.frames, f)
		a.mu.Unlock()
		reply := map[string]any{}
		for _, k := range []string{"protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"} {
			reply[k] = f[k]
		}
		switch f["kind"] {
		case "bind":
			reply["kind"], reply["operations"], reply["limits"] = "bound", f["operations"], f["limits"]
			write(reply)
		case "invoke":
			wg.Go(func() {
				<-a.release
				reply["kind"], reply["ok"] = "result", true
				for _, k := range []string{"requestId", "idempotencyKey", "operation"} {
					reply[k] = f[k]
				}
				reply["data"] = map[string]any{"created": true, "bytesWritten": 1, "digest": strings.Repeat("a", 64)}
				if f["operation"] == "fs.read" {
					reply["data"] = map[string]any{"content": "x", "bytesRead": 1, "eof": true}
				}
				write(reply)
			})
		case "abort":
			reply["kind"], reply["requestId"], reply["targetRequestId"], reply["aborted"] = "aborted", f["requestId"], f["targetRequestId"], true
			write(reply)
		case "revoke":
			reply["kind"] = "revoked"
			write(reply)
		}
	}
}

func (a *scripted) framesOf(kind string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, f := range a.frames {
		if f["kind"] == kind {
			out = append(out, f)
		}
	}
	return out
}

func scriptedDescriptor(socket, host, session string, ops ...string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"protocolVersion": "1.0", "adapterId": "scripted-fs", "adapterVersion": "1.0.0",
		"endpoint":   map[string]any{"transport": "unix", "path": socket},
		"binding":    map[string]any{"hostInstanceId": host, "sessionId": session, "generation": 1, "capabilityHandle": strings.Repeat("k", 43)},
		"operations": ops,
		"limits": map[string]any{"maxRequestBytes": 1048576, "maxResponseBytes": 1048576, "maxConcurrentRequests": 4,
			"maxQueuedRequests": 16, "requestTimeoutMs": 30000, "maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000},
	})
	return b
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
