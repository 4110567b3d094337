package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// These tests flood airlock-fs's two sockets from one process (issue 16) while a client of
// another process binds grants or calls the admin socket, and a bound connection keeps
// serving. The deadlines are short so that the tests are quick; counts are asserted once they
// passed, never latencies.

// fsRSSBound is a generous bound on airlock-fs's peak RSS through a flood.
const fsRSSBound = 400 << 20

// floodFlags are the short deadlines of these tests; info keeps one debug line per flooding
// connection out of the log.
var floodFlags = []string{"--bind-timeout", "1s", "--admin-line-timeout", "1s", "--log-level", "info"}

// roomy lets every slow connection of the one flooding process in, so that the deadlines, not
// evictions, are what close them.
var roomy = []string{"--max-unbound-connections", "100", "--max-admin-connections", "100", "--max-connections-per-peer", "100"}

func TestFloodServingSocketIdle(t *testing.T) {
	fsp := startFS(t, floodFlags...)
	floodServing(t, fsp, daemontest.FloodOptions{Socket: fsp.socket, Conns: 2000})
}

func TestFloodServingSocketSlow(t *testing.T) {
	fsp := startFS(t, append(floodFlags, roomy...)...)
	floodServing(t, fsp, daemontest.FloodOptions{Socket: fsp.socket, Conns: 64, Slow: true})
}

func TestFloodAdminSocketIdle(t *testing.T) {
	fsp := startFS(t, floodFlags...)
	r := floodAdmin(t, fsp, daemontest.FloodOptions{Socket: fsp.admin, Conns: 2000})
	if r.Codes["connection_evicted"] == 0 {
		t.Errorf("no idle admin connection was evicted: %v", r)
	}
}

func TestFloodAdminSocketSlow(t *testing.T) {
	fsp := startFS(t, append(floodFlags, roomy...)...)
	r := floodAdmin(t, fsp, daemontest.FloodOptions{Socket: fsp.admin, Conns: 64, Slow: true, Prefix: `{"op":"grants"}`})
	if r.Codes["line_timeout"] == 0 {
		t.Errorf("no slow admin connection was closed with line_timeout: %v", r)
	}
}

// floodServing floods the serving socket with o while 100 grants bind.
func floodServing(t *testing.T, fsp *fsProcess, o daemontest.FloodOptions) {
	admin := dialAdmin(t, fsp.admin)
	held := bindGrant(t, fsp, admin.grant(t, 0))
	if held == nil {
		t.Fatal("bind before the flood failed")
	}
	descs := make([]json.RawMessage, 100)
	for i := range descs {
		descs[i] = admin.grant(t, i+1)
	}
	admin.nc.Close()

	flood := daemontest.StartFlood(t, o)
	// Ten workers, as in the daemon's flood tests: every connect waits behind the flood's.
	ok := parallel(100, func(i int) bool { return bindGrant(t, fsp, descs[i]) != nil })
	during := held.stat(t, "during")
	r := flood.Stop()
	after := held.stat(t, "after")
	rss := daemontest.PeakRSS(t, fsp.cmd.Process.Pid)

	t.Logf("during the flood: %d of 100 binds succeeded", ok)
	t.Logf("flood: %v; airlock-fs peak RSS %d MiB", r, rss>>20)
	if ok < 99 {
		t.Errorf("%d of 100 binds succeeded during the flood, want at least 99", ok)
	}
	if !during || !after {
		t.Errorf("the bound connection stopped serving: during %v, after %v", during, after)
	}
	// Before bind nothing is written: every flooding connection is closed silently.
	if r.LeftOpen != 0 || r.ClosedByServer != r.Opened || r.Codes[""] != r.ClosedByServer {
		t.Errorf("flood connections left open past the bind deadline, or told something: %v", r)
	}
	if rss > fsRSSBound {
		t.Errorf("airlock-fs peak RSS %d MiB, want at most %d MiB", rss>>20, fsRSSBound>>20)
	}
}

// floodAdmin floods the admin socket with o while 100 grants calls run, and the CLI lists and
// revokes a grant.
func floodAdmin(t *testing.T, fsp *fsProcess, o daemontest.FloodOptions) *daemontest.FloodResult {
	admin := dialAdmin(t, fsp.admin)
	held := bindGrant(t, fsp, admin.grant(t, 0))
	if held == nil {
		t.Fatal("bind before the flood failed")
	}
	admin.grant(t, 1)
	admin.nc.Close()

	flood := daemontest.StartFlood(t, o)
	ok := parallel(100, func(int) bool {
		err := grantsOnce(fsp.admin)
		if err != nil {
			t.Logf("grants during the flood: %v", err)
		}
		return err == nil
	})
	out, errOut, code := fsp.run(t, nil, "grants", "--admin-socket", fsp.admin, "--json")
	var list struct {
		Grants []struct {
			GrantID   string `json:"grantId"`
			SessionID string `json:"sessionId"`
		} `json:"grants"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Grants) != 2 {
		t.Fatalf("airlock-fs grants during the flood: %d %s %s", code, out, errOut)
	}
	i := slices.IndexFunc(list.Grants, func(g struct {
		GrantID   string `json:"grantId"`
		SessionID string `json:"sessionId"`
	}) bool {
		return g.SessionID == "s1"
	})
	if _, errOut, code := fsp.run(t, nil, "revoke-grant", "--admin-socket", fsp.admin, list.Grants[i].GrantID); code != 0 {
		t.Errorf("airlock-fs revoke-grant during the flood: %d %s", code, errOut)
	}
	during := held.stat(t, "during")
	r := flood.Stop()
	after := held.stat(t, "after")
	rss := daemontest.PeakRSS(t, fsp.cmd.Process.Pid)

	t.Logf("during the flood: %d of 100 grants calls succeeded", ok)
	t.Logf("flood: %v; airlock-fs peak RSS %d MiB", r, rss>>20)
	if ok < 99 {
		t.Errorf("%d of 100 grants calls succeeded during the flood, want at least 99", ok)
	}
	if !during || !after {
		t.Errorf("the bound connection stopped serving: during %v, after %v", during, after)
	}
	if r.LeftOpen != 0 || r.ClosedByServer != r.Opened {
		t.Errorf("flood connections left open past the admin line deadline: %v", r)
	}
	for c := range r.Codes {
		if c != "line_timeout" && c != "connection_evicted" {
			t.Errorf("flood connections closed with code %q: %v", c, r)
		}
	}
	if rss > fsRSSBound {
		t.Errorf("airlock-fs peak RSS %d MiB, want at most %d MiB", rss>>20, fsRSSBound>>20)
	}
	return r
}

// adminConn is one admin connection of the test process.
type adminConn struct {
	nc net.Conn
	br *bufio.Reader
}

func dialAdmin(t *testing.T, socket string) *adminConn {
	t.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &adminConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
}

// call sends one admin request and returns its answer.
func (a *adminConn) call(req string) (map[string]any, error) {
	a.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.nc.Write([]byte(req + "\n")); err != nil {
		return nil, err
	}
	line, err := a.br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, err
	}
	if m["ok"] != true {
		return m, fmt.Errorf("admin answer %s", line)
	}
	return m, nil
}

// grant mints a grant for session s<i> over the test root and returns its descriptor.
func (a *adminConn) grant(t *testing.T, i int) json.RawMessage {
	t.Helper()
	req := fmt.Sprintf(`{"op":"grant","root":%q,"hostInstanceId":"host-1","sessionId":"s%d","generation":1,"operations":["fs.stat"]}`, t.TempDir(), i)
	m, err := a.call(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m["data"])
	return b
}

// grantsOnce dials the admin socket, lists the grants and closes, as the CLI does.
func grantsOnce(socket string) error {
	nc, err := net.DialTimeout("unix", socket, 10*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	a := &adminConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<20)}
	m, err := a.call(`{"op":"grants"}`)
	if err != nil {
		return err
	}
	if _, ok := m["data"].(map[string]any)["grants"]; !ok {
		return fmt.Errorf("no grants list in %v", m)
	}
	return nil
}

// boundConn is a serving connection bound as the daemon binds one.
type boundConn struct {
	nc    net.Conn
	br    *bufio.Reader
	ident tooladapter.Identity
	calls int
}

// bindGrant connects to the serving socket and binds desc; nil when the bind fails.
func bindGrant(t *testing.T, fsp *fsProcess, desc json.RawMessage) *boundConn {
	t.Helper()
	var probe struct {
		Binding tooladapter.Binding `json:"binding"`
	}
	if err := json.Unmarshal(desc, &probe); err != nil {
		t.Fatal(err)
	}
	d, perr := tooladapter.ParseDescriptor(desc, probe.Binding)
	if perr != nil {
		t.Fatal(perr)
	}
	ident := tooladapter.Identity{AdapterID: d.AdapterID, AdapterVersion: d.AdapterVersion,
		HostInstanceID: probe.Binding.HostInstanceID, SessionID: probe.Binding.SessionID, Generation: probe.Binding.Generation}
	bind, perr := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindBind, Identity: ident,
		CapabilityHandle: d.Binding.CapabilityHandle, Operations: d.Operations, Limits: &d.Limits}, 0)
	if perr != nil {
		t.Fatal(perr)
	}
	nc, err := net.DialTimeout("unix", fsp.socket, 10*time.Second)
	if err != nil {
		t.Logf("bind: %v", err)
		return nil
	}
	t.Cleanup(func() { nc.Close() })
	b := &boundConn{nc: nc, br: bufio.NewReaderSize(nc, 1<<20), ident: ident}
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(bind); err != nil {
		t.Logf("bind: %v", err)
		return nil
	}
	line, err := b.br.ReadBytes('\n')
	if err != nil || !bytes.Contains(line, []byte(`"kind":"bound"`)) {
		t.Logf("bind: %v %.200s", err, line)
		return nil
	}
	nc.SetDeadline(time.Time{})
	return b
}

// stat runs one fs.stat on the bound connection and reports whether it succeeded.
func (b *boundConn) stat(t *testing.T, when string) bool {
	t.Helper()
	b.calls++
	id := fmt.Sprintf("%s-%d", when, b.calls)
	f, perr := tooladapter.EncodeFrame(&tooladapter.Frame{Kind: tooladapter.KindInvoke, Identity: b.ident, RequestID: id,
		IdempotencyKey: "k-" + id, Operation: tooladapter.OpStat, Payload: json.RawMessage(`{"path":"."}`)}, 0)
	if perr != nil {
		t.Fatal(perr)
	}
	b.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer b.nc.SetDeadline(time.Time{})
	if _, err := b.nc.Write(f); err != nil {
		t.Logf("stat %s: %v", when, err)
		return false
	}
	line, err := b.br.ReadBytes('\n')
	if err != nil || !strings.Contains(string(line), `"ok":true`) {
		t.Logf("stat %s: %v %.300s", when, err, line)
		return false
	}
	return true
}

// parallel runs call(0) … call(n-1) on ten workers, each call 100 ms after the worker's last so
// that they meet a few deadlines, and returns how many succeeded.
func parallel(n int, call func(i int) bool) int {
	var wg sync.WaitGroup
	var ok atomic.Int64
	next := atomic.Int64{}
	for range 10 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if call(i) {
					ok.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return int(ok.Load())
}
