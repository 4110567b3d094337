package server

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// lineTimeout bounds each wait for a frame; it fires only when something is broken.
const lineTimeout = 10 * time.Second

type fixture struct {
	t      *testing.T
	s      *Server
	dir    string
	root   string
	logs   *daemontest.SyncBuffer
	handle string // of the last grant
}

// newFixture starts a server; conns, when given, are its connection limits.
func newFixture(t *testing.T, conns ...ConnLimits) *fixture {
	t.Helper()
	var cl ConnLimits
	if len(conns) > 0 {
		cl = conns[0]
	}
	dir := daemontest.ShortDir(t)
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	logs := &daemontest.SyncBuffer{}
	s, err := Start(Config{
		Socket:      filepath.Join(dir, "run", "fs.sock"),
		AdminSocket: filepath.Join(dir, "run", "admin.sock"),
		Version:     "dev",
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Conns:       cl,
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, s: s, dir: dir, root: root, logs: logs}
	t.Cleanup(func() {
		s.Close()
		if t.Failed() {
			t.Logf("airlock-fs logs:\n%s", logs.String())
		}
	})
	return f
}

// adminRaw sends one raw admin request line and returns the answer line.
func (f *fixture) adminRaw(line string) []byte {
	f.t.Helper()
	nc, err := net.Dial("unix", f.s.cfg.AdminSocket)
	if err != nil {
		f.t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(lineTimeout))
	if _, err := io.WriteString(nc, line+"\n"); err != nil {
		f.t.Fatal(err)
	}
	b, err := bufio.NewReader(nc).ReadBytes('\n')
	if err != nil {
		f.t.Fatalf("admin answer: %v", err)
	}
	return b
}

// admin sends one raw admin request line and returns the decoded answer.
func (f *fixture) admin(line string) (ok bool, data json.RawMessage, code string) {
	f.t.Helper()
	b := f.adminRaw(line)
	var resp struct {
		OK    bool            `json:"ok"`
		Data  json.RawMessage `json:"data"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		f.t.Fatalf("admin answer %q: %v", b, err)
	}
	if resp.Error != nil {
		code = resp.Error.Code
	}
	return resp.OK, resp.Data, code
}

type grantOpts struct {
	ops    []string
	limits map[string]int64
	// host and session default to host-1 and s1.
	host, session string
}

// grant makes a grant for generation 1 and returns its descriptor as a map.
func (f *fixture) grant(o grantOpts) map[string]any {
	f.t.Helper()
	if o.ops == nil {
		o.ops = []string{"fs.list", "fs.stat", "fs.read", "fs.search", "fs.write", "fs.edit"}
	}
	req := map[string]any{"op": "grant", "root": f.root, "hostInstanceId": cmp.Or(o.host, "host-1"),
		"sessionId": cmp.Or(o.session, "s1"), "generation": 1, "operations": o.ops}
	if o.limits != nil {
		req["limits"] = o.limits
	}
	b, _ := json.Marshal(req)
	ok, data, code := f.admin(string(b))
	if !ok {
		f.t.Fatalf("grant: %s", code)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		f.t.Fatal(err)
	}
	f.handle = d["binding"].(map[string]any)["capabilityHandle"].(string)
	return d
}

func grantIDs(t *testing.T, f *fixture) []string {
	ok, data, code := f.admin(`{"op":"grants"}`)
	if !ok {
		t.Fatalf("grants: %s", code)
	}
	var l struct {
		Grants []GrantInfo `json:"grants"`
	}
	json.Unmarshal(data, &l)
	var ids []string
	for _, g := range l.Grants {
		ids = append(ids, g.GrantID)
	}
	return ids
}

// wire is a test daemon: it speaks frames as raw JSON.
type wire struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	id map[string]any
}

func (f *fixture) dial() *wire {
	f.t.Helper()
	nc, err := net.Dial("unix", f.s.cfg.Socket)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { nc.Close() })
	return &wire{t: f.t, nc: nc, br: bufio.NewReaderSize(nc, 8<<20)}
}

// bindFrame is the bind frame of descriptor d.
func bindFrame(d map[string]any) map[string]any {
	b := d["binding"].(map[string]any)
	return map[string]any{
		"protocolVersion": "1.0", "kind": "bind", "adapterId": d["adapterId"], "adapterVersion": d["adapterVersion"],
		"hostInstanceId": b["hostInstanceId"], "sessionId": b["sessionId"], "generation": b["generation"],
		"capabilityHandle": b["capabilityHandle"], "operations": d["operations"], "limits": d["limits"],
	}
}

func (w *wire) send(frame map[string]any) {
	w.t.Helper()
	b, _ := json.Marshal(frame)
	w.sendRaw(string(b))
}

func (w *wire) sendRaw(line string) {
	w.t.Helper()
	if _, err := io.WriteString(w.nc, line+"\n"); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

// bind binds d and checks the bound frame.
func (f *fixture) bind(d map[string]any) *wire {
	f.t.Helper()
	w := f.dial()
	bf := bindFrame(d)
	w.send(bf)
	got := w.next()
	if got["kind"] != "bound" {
		f.t.Fatalf("bound: %v", got)
	}
	w.id = map[string]any{}
	for _, k := range []string{"protocolVersion", "adapterId", "adapterVersion", "hostInstanceId", "sessionId", "generation"} {
		w.id[k] = bf[k]
	}
	return w
}

// next reads one frame and checks that it carries the binding's identity.
func (w *wire) next() map[string]any {
	w.t.Helper()
	w.nc.SetReadDeadline(time.Now().Add(lineTimeout))
	line, err := w.br.ReadBytes('\n')
	if err != nil {
		w.t.Fatalf("read: %v (partial %q)", err, line)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		w.t.Fatalf("invalid frame %q", line)
	}
	for k, v := range w.id {
		if m[k] != v {
			w.t.Fatalf("frame %s: %s = %v, want %v", line, k, m[k], v)
		}
	}
	return m
}

// expectSilentClose asserts that the adapter closes the connection without writing a byte.
func (w *wire) expectSilentClose() {
	w.t.Helper()
	w.nc.SetReadDeadline(time.Now().Add(lineTimeout))
	b, err := io.ReadAll(w.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		w.t.Fatal("expected the connection to close; it stayed open")
	}
	if len(b) != 0 {
		w.t.Fatalf("adapter wrote %q before closing", b)
	}
}

func (w *wire) invoke(id, key, op string, payload any) {
	w.t.Helper()
	f := map[string]any{"kind": "invoke", "requestId": id, "idempotencyKey": key, "operation": op, "payload": payload}
	for k, v := range w.id {
		f[k] = v
	}
	w.send(f)
}

func (w *wire) abort(id, target string) {
	w.t.Helper()
	f := map[string]any{"kind": "abort", "requestId": id, "targetRequestId": target}
	for k, v := range w.id {
		f[k] = v
	}
	w.send(f)
}

// call invokes and returns the result frame.
func (w *wire) call(id, key, op string, payload any) map[string]any {
	w.t.Helper()
	w.invoke(id, key, op, payload)
	r := w.next()
	if r["kind"] != "result" || r["requestId"] != id || r["idempotencyKey"] != key || r["operation"] != op {
		w.t.Fatalf("result of %s: %v", id, r)
	}
	return r
}

func errorCode(r map[string]any) string {
	if r["ok"] == true {
		return ""
	}
	e, _ := r["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// setHook installs a dispatch hook for the test.
func setHook(t *testing.T, h func(ctx context.Context, op string)) {
	dispatchHook.Store(&h)
	t.Cleanup(func() { dispatchHook.Store(nil) })
}
