package validate

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// allOps is every operation, in an order other than the canonical one, so that the bind
// probe checks the echo of the descriptor's order.
const allOps = "fs.read,fs.list,fs.stat,fs.search,fs.write,fs.edit"

// airlockFS is a running airlock-fs serve.
type airlockFS struct {
	bin, socket, admin string
}

func startAirlockFS(t *testing.T) *airlockFS {
	t.Helper()
	dir := daemontest.ShortDir(t)
	p := &airlockFS{bin: daemontest.Binary(t, "airlock-fs"), socket: filepath.Join(dir, "run", "fs.sock"),
		admin: filepath.Join(dir, "run", "admin.sock")}
	var stderr daemontest.SyncBuffer
	cmd := exec.Command(p.bin, "serve", "--socket", p.socket, "--admin-socket", p.admin)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(20 * time.Second)
	for exec.Command(p.bin, "grants", "--admin-socket", p.admin).Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("airlock-fs did not start:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// grant mints a grant of ops for root and returns its descriptor.
func (p *airlockFS) grant(t *testing.T, root, ops string, extra ...string) []byte {
	t.Helper()
	args := append([]string{"grant", "--admin-socket", p.admin, "--root", root, "--host-instance", "host-test",
		"--session", "conformance", "--generation", "3", "--operations", ops}, extra...)
	var out, errb bytes.Buffer
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("grant: %v %s", err, errb.String())
	}
	return out.Bytes()
}

func runTool(t *testing.T, cfg ToolConfig) Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := RunToolAdapter(ctx, cfg)
	t.Logf("report:\n%s", dump(rep))
	return rep
}

func scratchDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(daemontest.ShortDir(t), "scratch")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func wantToolPass(t *testing.T, rep Report, skipped ...string) {
	t.Helper()
	if !rep.Pass {
		t.Fatalf("the harness failed a conforming adapter:\n%s", dump(rep))
	}
	for _, p := range rep.Probes {
		want := false
		for _, s := range skipped {
			want = want || s == p.Name
		}
		if p.Skipped != want {
			t.Errorf("probe %s: skipped %v, want %v", p.Name, p.Skipped, want)
		}
	}
	if len(rep.Probes) != 18 {
		t.Errorf("%d probes, want 18", len(rep.Probes))
	}
}

func TestToolAdapterAirlockFS(t *testing.T) {
	fs := startAirlockFS(t)
	scratch := scratchDir(t)
	desc := fs.grant(t, scratch, allOps, "--max-response-bytes", "65536")
	rep := runTool(t, ToolConfig{Socket: fs.socket, Descriptor: desc, Scratch: scratch})
	wantToolPass(t, rep)
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("fixtures left in the scratch directory: %v", ents)
	}
	if p, _ := rep.Probe(ProbeToolTraversal); !strings.Contains(p.Detail, "× 6 operations") {
		t.Errorf("traversal: %q", p.Detail)
	}
}

func TestToolAdapterAirlockFSReadOnly(t *testing.T) {
	fs := startAirlockFS(t)
	scratch := scratchDir(t)
	desc := fs.grant(t, scratch, "fs.stat,fs.read")
	rep := runTool(t, ToolConfig{Descriptor: desc, Scratch: scratch})
	wantToolPass(t, rep, "fs.list", "fs.search", ProbeToolSearchResults, "fs.write", "fs.edit")
}

// TestToolAdapterAirlockFSTwice runs the harness twice against one airlock-fs process and one
// grant, whose idempotency memory outlives the first run's connections: the second run must
// pass too, so no requestId or idempotencyKey of the first may come again. (With the keys of
// the first run, fs.stat and fs.read failed idempotency_conflict in the second.)
func TestToolAdapterAirlockFSTwice(t *testing.T) {
	fs := startAirlockFS(t)
	for _, ops := range []string{"fs.stat,fs.read", allOps} {
		scratch := scratchDir(t)
		desc := fs.grant(t, scratch, ops)
		for run := range 2 {
			rep := runTool(t, ToolConfig{Socket: fs.socket, Descriptor: desc, Scratch: scratch})
			if !rep.Pass {
				t.Fatalf("%s: run %d failed:\n%s", ops, run+1, dump(rep))
			}
		}
	}
}

// TestToolAdapterFailureNamesRequest: an adapter over another data source (it answers
// not_found to every operation) fails each probe with the request it was sent, path and
// arguments, not only the operation and the code.
func TestToolAdapterFailureNamesRequest(t *testing.T) {
	g := newToolGrant(t, "fs.read", "fs.stat", "fs.list")
	brokenAdapter(t, g, "elsewhere")
	rep := runTool(t, ToolConfig{Descriptor: g.descriptor(t, "broken"), Scratch: g.root, Wait: 2 * time.Second})
	ents, err := os.ReadDir(g.root)
	if err != nil || len(ents) != 0 {
		t.Fatalf("fixtures left: %v %v", ents, err)
	}
	for probe, want := range map[string][]string{
		"fs.read":            {`fs.read {"path":"airlock-conformance-`, `/hello.txt"} answered error not_found ("no such entry`, "beneath --scratch"},
		"fs.stat":            {`fs.stat {"path":"airlock-conformance-`, `/hello.txt"} answered error not_found`},
		"fs.list":            {`fs.list {"maxEntries":100,"path":"airlock-conformance-`, `"} answered error not_found`},
		ProbeToolBounds:      {`fs.read {"maxBytes":7,"offset":10,"path":"airlock-conformance-`, `/window.txt"} answered error not_found`, `fs.list {"maxEntries":2,"path":"airlock-conformance-`},
		ProbeToolIdempotency: {`fs.read {"maxBytes":4096,"path":"airlock-conformance-`, `/big.txt"} with idempotencyKey idem-`, "twice: error not_found"},
	} {
		p, ok := rep.Probe(probe)
		if !ok || p.Pass {
			t.Errorf("probe %s passed: %+v", probe, p)
			continue
		}
		for _, w := range want {
			if !strings.Contains(p.Detail, w) {
				t.Errorf("probe %s: no %q in %q", probe, w, p.Detail)
			}
		}
	}
	if p, _ := rep.Probe(ProbeToolTraversal); !p.Pass {
		t.Errorf("traversal: every path was refused, yet %q", p.Detail)
	}
}

func TestToolAdapterBadDescriptor(t *testing.T) {
	rep := runTool(t, ToolConfig{Descriptor: []byte(`{"protocolVersion":"1.0"}`), Scratch: t.TempDir()})
	if rep.Pass || len(rep.Probes) != 1 || rep.Probes[0].Name != ProbeToolDescriptor {
		t.Fatalf("report: %s", dump(rep))
	}
}

// toolGrant is a grant for an in-test or example adapter.
type toolGrant struct {
	socket, root string
	handle       string
	ops          []string
	limits       tooladapter.Limits
}

func newToolGrant(t *testing.T, ops ...string) *toolGrant {
	t.Helper()
	run := filepath.Join(daemontest.ShortDir(t), "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 32)
	rand.Read(b)
	return &toolGrant{socket: filepath.Join(run, "a.sock"), root: scratchDir(t), handle: base64.RawURLEncoding.EncodeToString(b), ops: ops,
		limits: tooladapter.Limits{MaxRequestBytes: 1 << 20, MaxResponseBytes: 1 << 20, MaxConcurrentRequests: 4, MaxQueuedRequests: 16,
			RequestTimeoutMs: 5000, MaxIdempotencyKeys: 256, IdempotencyTtlMs: 3_600_000}}
}

func (g *toolGrant) binding() map[string]any {
	return map[string]any{"hostInstanceId": "host-test", "sessionId": "conformance", "generation": 2, "capabilityHandle": g.handle}
}

func (g *toolGrant) descriptor(t *testing.T, adapterID string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"protocolVersion": "1.0", "adapterId": adapterID, "adapterVersion": "0.1.0",
		"endpoint": map[string]any{"transport": "unix", "path": g.socket}, "binding": g.binding(), "operations": g.ops, "limits": g.limits})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitSocket(t *testing.T, path string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatal("the adapter exited")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the adapter did not listen")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestToolAdapterPython runs the harness against the stdlib-only Python example.
func TestToolAdapterPython(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	g := newToolGrant(t, "fs.stat", "fs.list", "fs.read", "fs.search")
	cfg, _ := json.Marshal(map[string]any{"socket": g.socket, "root": g.root, "adapterId": "airlock-fs-ro", "adapterVersion": "0.1.0",
		"binding": g.binding(), "operations": g.ops, "limits": g.limits})
	cfgPath := filepath.Join(filepath.Dir(g.socket), "config.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../examples/tool-adapters/python/airlock_fs_ro.py")
	if err != nil {
		t.Fatal(err)
	}
	desc, err := exec.Command(python, "-B", script, cfgPath, "--descriptor").Output()
	if err != nil {
		t.Fatalf("--descriptor: %v", err)
	}
	var stderr daemontest.SyncBuffer
	cmd := exec.Command(python, "-B", script, cfgPath)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if cmd.ProcessState != nil && !cmd.ProcessState.Success() {
			t.Errorf("the adapter exited with %v:\n%s", cmd.ProcessState, stderr.String())
		}
		if _, err := os.Lstat(g.socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the adapter left its socket: %v", err)
		}
	})
	waitSocket(t, g.socket, exited)
	rep := runTool(t, ToolConfig{Descriptor: desc, Scratch: g.root})
	wantToolPass(t, rep, "fs.write", "fs.edit")
	if p, _ := rep.Probe(ProbeToolIdempotency); p.Detail != "fs.read replayed" {
		t.Errorf("idempotency: %q", p.Detail)
	}
}

// brokenAdapter is an in-test adapter server that breaks one rule, named by mode:
//
//	reflect   error messages quote the capability handle
//	limits    bound echoes maxQueuedRequests plus one
//	follow    paths are joined to the root and opened, symlinks and ".." followed
//	identity  results carry another sessionId
//	elsewhere serves another data source: every operation answers not_found
//	search-*  fs.search breaks one point of its results (brokenSearch)
//
// It answers bind, fs.stat, fs.read, fs.list and fs.search naively, aborts with aborted:false and revoke
// with revoked and a close.
func brokenAdapter(t *testing.T, g *toolGrant, mode string) {
	t.Helper()
	ln, err := net.Listen("unix", g.socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				serveBroken(g, mode, c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

func serveBroken(g *toolGrant, mode string, c net.Conn) {
	br := bufio.NewReader(c)
	var ident tooladapter.Identity
	send := func(f *tooladapter.Frame) bool {
		f.Identity = ident
		if mode == "identity" && f.Kind == tooladapter.KindResult {
			f.SessionID = "another-session"
		}
		b, e := tooladapter.EncodeFrame(f, 0)
		if e != nil {
			panic(e)
		}
		_, err := c.Write(b)
		return err == nil
	}
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		var in struct {
			Kind            string          `json:"kind"`
			RequestID       string          `json:"requestId"`
			TargetRequestID string          `json:"targetRequestId"`
			IdempotencyKey  string          `json:"idempotencyKey"`
			Operation       string          `json:"operation"`
			Payload         json.RawMessage `json:"payload"`
			tooladapter.Identity
		}
		if json.Unmarshal(line, &in) != nil {
			return
		}
		if ident.AdapterID == "" && in.Kind != "bind" {
			return
		}
		switch in.Kind {
		case "bind":
			ident = in.Identity
			l := g.limits
			if mode == "limits" {
				l.MaxQueuedRequests++
			}
			send(&tooladapter.Frame{Kind: tooladapter.KindBound, Operations: g.ops, Limits: &l})
		case "abort":
			send(&tooladapter.Frame{Kind: tooladapter.KindAborted, RequestID: in.RequestID, TargetRequestID: in.TargetRequestID})
		case "revoke":
			send(&tooladapter.Frame{Kind: tooladapter.KindRevoked})
			return
		case "invoke":
			res := &tooladapter.Frame{Kind: tooladapter.KindResult, RequestID: in.RequestID, IdempotencyKey: in.IdempotencyKey, Operation: in.Operation}
			data, msg := brokenOp(g, mode, in.Operation, in.Payload)
			if data != nil {
				res.OK, res.Data = true, data
			} else {
				if mode == "reflect" {
					msg += " for capability " + g.handle
				}
				code := "refused"
				if mode == "elsewhere" {
					code = "not_found"
				}
				res.Error = &tooladapter.ErrorBody{Code: code, Message: msg}
			}
			if !send(res) {
				return
			}
		}
	}
}

// brokenOp runs one operation without any confinement.
func brokenOp(g *toolGrant, mode, op string, payload json.RawMessage) (json.RawMessage, string) {
	var p struct {
		Path     string `json:"path"`
		Offset   int64  `json:"offset"`
		MaxBytes int64  `json:"maxBytes"`
	}
	json.Unmarshal(payload, &p)
	if mode == "elsewhere" {
		return nil, "no such entry in the other data source"
	}
	if mode != "follow" && (tooladapter.ValidateRelativePath(p.Path) != nil || strings.Contains(p.Path, "link-")) {
		return nil, "invalid path"
	}
	full := filepath.Join(g.root, p.Path)
	var data any
	switch op {
	case tooladapter.OpSearch:
		var msg string
		if data, msg = brokenSearch(g, mode, payload); data == nil {
			return nil, msg
		}
	case tooladapter.OpStat:
		st, err := os.Stat(full)
		if err != nil {
			return nil, "not found"
		}
		typ := "file"
		if st.IsDir() {
			typ = "directory"
		}
		data = map[string]any{"type": typ, "size": st.Size()}
	case tooladapter.OpRead:
		b, err := os.ReadFile(full)
		if err != nil || !utf8.Valid(b) {
			return nil, "unreadable"
		}
		lo := min(p.Offset, int64(len(b)))
		max := p.MaxBytes
		if max == 0 {
			max = 65536
		}
		hi := min(lo+max, int64(len(b)))
		data = map[string]any{"content": string(b[lo:hi]), "bytesRead": hi - lo, "eof": hi == int64(len(b))}
	case tooladapter.OpList:
		ents, err := os.ReadDir(full)
		if err != nil {
			return nil, "not a directory"
		}
		list := []map[string]any{}
		for _, e := range ents {
			if e.Type()&os.ModeSymlink != 0 {
				continue
			}
			typ := "file"
			if e.IsDir() {
				typ = "directory"
			}
			list = append(list, map[string]any{"name": e.Name(), "type": typ})
		}
		truncated := false
		if var2 := struct {
			MaxEntries int `json:"maxEntries"`
		}{}; json.Unmarshal(payload, &var2) == nil && var2.MaxEntries > 0 && len(list) > var2.MaxEntries {
			list, truncated = list[:var2.MaxEntries], true
		}
		data = map[string]any{"entries": list, "truncated": truncated}
	default:
		return nil, "not granted"
	}
	b, _ := json.Marshal(data)
	return b, ""
}

// TestToolAdapterBroken shows that each breakage fails its probe, and only what it breaks
// among bind, traversal, identity and handle_not_reflected.
func TestToolAdapterBroken(t *testing.T) {
	for _, tc := range []struct{ mode, probe string }{
		{"reflect", ProbeToolNoHandle},
		{"limits", ProbeToolBind},
		{"follow", ProbeToolTraversal},
		{"identity", ProbeToolIdentity},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			g := newToolGrant(t, "fs.read", "fs.stat", "fs.list")
			brokenAdapter(t, g, tc.mode)
			rep := runTool(t, ToolConfig{Descriptor: g.descriptor(t, "broken"), Scratch: g.root, Wait: 2 * time.Second})
			if rep.Pass {
				t.Fatal("the harness passed a broken adapter")
			}
			for _, name := range []string{ProbeToolBind, ProbeToolTraversal, ProbeToolIdentity, ProbeToolNoHandle} {
				if p, ok := rep.Probe(name); !ok || p.Pass != (name != tc.probe) {
					t.Errorf("probe %s: %+v, want pass %v", name, p, name != tc.probe)
				}
			}
		})
	}
}
