package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// These tests pin the connection admission of issue 16 in process; cmd/airlock-fs floods the
// real binary. Every connection here comes from the test process: one peer.

func TestUnboundConnectionsMakeRoomButBoundOnesStay(t *testing.T) {
	f := newFixture(t, ConnLimits{MaxUnbound: 2, MaxPerPeer: 2, BindTimeout: time.Hour})
	bound := f.bind(f.grant(grantOpts{}))
	a, b := f.dial(), f.dial()
	waitFor(t, func() bool { return f.s.unbound.Len() == 2 })
	c := f.dial()
	// The least recently connected unbound connection makes room, silently.
	a.expectSilentClose()
	waitFor(t, func() bool { return f.s.unbound.Len() == 2 })
	// The bound connection is not in the pool, and still serves.
	if r := bound.call("r1", "k1", "fs.stat", map[string]any{"path": "."}); r["ok"] != true {
		t.Fatalf("bound connection after an eviction: %v", r)
	}
	d := f.dial()
	b.expectSilentClose()
	for _, w := range []*wire{c, d} {
		w.nc.Close()
	}
	if !strings.Contains(f.logs.String(), "event=evicted") {
		t.Errorf("no eviction warning in the logs:\n%s", f.logs.String())
	}
}

func TestBindTimeoutClosesSilently(t *testing.T) {
	// Long enough that the last bind, a dial and one write, is in time on a loaded machine
	// (at 100 ms, CI's fuzzing beside it made the write late once).
	f := newFixture(t, ConnLimits{BindTimeout: time.Second})
	silent := f.dial()
	slow := f.dial()
	slow.nc.Write([]byte(`{"protocolVersion":"1.0","kind":"bi`))
	silent.expectSilentClose()
	slow.expectSilentClose()
	waitFor(t, func() bool { return strings.Count(f.logs.String(), "reason=bind_timeout") == 2 })
	// A bind in time still binds.
	f.bind(f.grant(grantOpts{}))
}

// adminLine reads one admin answer and returns its error code, retryable flag and details.
func adminLine(t *testing.T, br *bufio.Reader) (string, bool, map[string]any) {
	t.Helper()
	b, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("admin answer: %v", err)
	}
	var resp struct {
		OK    bool `json:"ok"`
		Error *struct {
			Code      string         `json:"code"`
			Retryable bool           `json:"retryable"`
			Details   map[string]any `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &resp); err != nil || resp.OK || resp.Error == nil {
		t.Fatalf("admin answer %q: %v", b, err)
	}
	return resp.Error.Code, resp.Error.Retryable, resp.Error.Details
}

func dialAdmin(t *testing.T, f *fixture) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("unix", f.s.cfg.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(lineTimeout))
	return nc, bufio.NewReader(nc)
}

func expectEOF(t *testing.T, br *bufio.Reader) {
	t.Helper()
	if b, err := br.ReadBytes('\n'); err != io.EOF {
		t.Fatalf("after the last answer: %q %v, want EOF", b, err)
	}
}

func TestAdminLineTimeout(t *testing.T) {
	f := newFixture(t, ConnLimits{AdminLineTimeout: 200 * time.Millisecond})
	for _, partial := range []string{"", `{"op":"gra`} {
		nc, br := dialAdmin(t, f)
		// A request in time is answered, and the deadline starts again after it.
		io.WriteString(nc, `{"op":"grants"}`+"\n")
		if b, err := br.ReadBytes('\n'); err != nil || !strings.Contains(string(b), `"ok":true`) {
			t.Fatalf("grants: %q %v", b, err)
		}
		io.WriteString(nc, partial)
		code, retryable, det := adminLine(t, br)
		if code != CodeLineTimeout || !retryable || det["timeoutMs"] != 200.0 {
			t.Fatalf("partial %q: %s retryable %v details %v, want line_timeout", partial, code, retryable, det)
		}
		expectEOF(t, br)
	}
}

func TestAdminIdleConnectionIsEvicted(t *testing.T) {
	f := newFixture(t, ConnLimits{MaxAdmin: 2, MaxPerPeer: 2, AdminLineTimeout: time.Hour})
	_, first := dialAdmin(t, f)
	dialAdmin(t, f)
	waitFor(t, func() bool { return f.s.admins.Len() == 2 })
	// The next call gets in; the least recently used idle connection is told why it goes.
	if ok, _, code := f.admin(`{"op":"grants"}`); !ok {
		t.Fatalf("grants with the admin pool full of idle connections: %s", code)
	}
	code, retryable, det := adminLine(t, first)
	if code != CodeConnectionEvicted || !retryable || det["maxAdminConnections"] != 2.0 {
		t.Fatalf("evicted connection got %s retryable %v details %v", code, retryable, det)
	}
	expectEOF(t, first)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(lineTimeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
	}
}
