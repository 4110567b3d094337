package toolclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

func TestBindInvokeRevoke(t *testing.T) {
	a := newAdapter(t, nil)
	c, ac := connect(t, a, descriptorMap(""), Options{})

	bind := ac.received(tooladapter.KindBind)
	if len(bind) != 1 {
		t.Fatalf("adapter got %d bind frames, want 1", len(bind))
	}
	h, _ := tooladapter.NewHandle(testHandle)
	if !bind[0].CapabilityHandle.Equal(h) {
		t.Fatal("bind does not carry the descriptor's handle")
	}
	if got := strings.Join(bind[0].Operations, ","); got != "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit" {
		t.Fatalf("bind operations = %s", got)
	}

	for _, op := range tooladapter.Operations {
		payload := map[string]json.RawMessage{
			tooladapter.OpList:   json.RawMessage(`{"path":".","maxEntries":10}`),
			tooladapter.OpStat:   statReq(7),
			tooladapter.OpRead:   json.RawMessage(`{"path":"a.txt","offset":0,"maxBytes":5}`),
			tooladapter.OpSearch: json.RawMessage(`{"path":"src","query":"x","maxResults":1}`),
			tooladapter.OpWrite:  json.RawMessage(`{"path":"new.txt","content":"hello","create":true}`),
			tooladapter.OpEdit:   json.RawMessage(`{"path":"a.txt","edits":[{"oldText":"a","newText":"b"}]}`),
		}[op]
		data, e := c.Invoke(context.Background(), op, IdempotencyKey(op, "call-1"), payload)
		if e != nil {
			t.Fatalf("%s: %v", op, e)
		}
		if want := resultData(op, 7); string(data) != string(want) {
			t.Fatalf("%s: data = %s, want %s", op, data, want)
		}
	}
	inv := ac.received(tooladapter.KindInvoke)
	if len(inv) != 6 {
		t.Fatalf("adapter got %d invokes, want 6", len(inv))
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, f := range inv {
		if !uuid.MatchString(f.RequestID) {
			t.Errorf("requestId %q is not a v4 UUID", f.RequestID)
		}
	}

	tel := c.Telemetry()
	if tel.AcceptedRequests != 6 || tel.CompletedRequests != 6 || tel.FailedRequests != 0 {
		t.Fatalf("telemetry = %+v", tel)
	}
	if len(tel.Operations) != 6 || tel.Operations[1].Operation != tooladapter.OpStat || tel.Operations[1].RequestLatencyMs.Count != 1 || tel.Operations[1].QueueWaitMs.Count != 1 {
		t.Fatalf("per-operation telemetry = %+v", tel.Operations)
	}
	secretFree(t, "telemetry", string(mustJSON(t, tel)), a.sock)

	c.Close()
	ac.waitFor(t, tooladapter.KindRevoke)
	c.Close() // idempotent
	_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k", statReq(1))
	wantCode(t, e, tooladapter.CodeSessionClosed)
}

func TestBindFailures(t *testing.T) {
	tests := []struct {
		name string
		hook hook
		opts func(m map[string]any)
		code string
	}{
		{"operations reordered", func(ac *adapterConn, f *tooladapter.Frame) {
			b := boundFor(f)
			b.Operations = []string{f.Operations[1], f.Operations[0]}
			ac.sendFrame(b)
		}, func(m map[string]any) { m["operations"] = []any{"fs.read", "fs.stat"} }, tooladapter.CodeContractMismatch},
		{"operation missing", func(ac *adapterConn, f *tooladapter.Frame) {
			b := boundFor(f)
			b.Operations = f.Operations[:1]
			ac.sendFrame(b)
		}, nil, tooladapter.CodeContractMismatch},
		{"limit changed", func(ac *adapterConn, f *tooladapter.Frame) {
			b := boundFor(f)
			l := *f.Limits
			l.MaxQueuedRequests++
			b.Limits = &l
			ac.sendFrame(b)
		}, nil, tooladapter.CodeContractMismatch},
		{"result before bound", func(ac *adapterConn, f *tooladapter.Frame) {
			r := &tooladapter.Frame{Kind: tooladapter.KindResult, Identity: f.Identity, RequestID: "r1", IdempotencyKey: "k", Operation: tooladapter.OpStat, OK: true, Data: resultData(tooladapter.OpStat, 1)}
			ac.sendFrame(r)
		}, nil, tooladapter.CodeProtocolInvalid},
		{"revoked before bound", func(ac *adapterConn, f *tooladapter.Frame) {
			ac.sendFrame(&tooladapter.Frame{Kind: tooladapter.KindRevoked, Identity: f.Identity})
		}, nil, tooladapter.CodeProtocolInvalid},
		{"other adapter version", func(ac *adapterConn, f *tooladapter.Frame) {
			b := boundFor(f)
			b.AdapterVersion = "1.2.1"
			ac.sendFrame(b)
		}, nil, tooladapter.CodeIdentityMismatch},
		{"other generation", func(ac *adapterConn, f *tooladapter.Frame) {
			b := boundFor(f)
			b.Generation = 3
			ac.sendFrame(b)
		}, nil, tooladapter.CodeBindingMismatch},
		{"bound echoes the handle", func(ac *adapterConn, f *tooladapter.Frame) {
			ac.send(`{"protocolVersion":"1.0","kind":"bound","capabilityHandle":"` + testHandle + `"}`)
		}, nil, tooladapter.CodeSecretReflected},
		{"malformed bound", func(ac *adapterConn, f *tooladapter.Frame) { ac.send(`{"protocolVersion":"1.0",`) }, nil, tooladapter.CodeProtocolInvalid},
		{"no answer", func(*adapterConn, *tooladapter.Frame) {}, func(m map[string]any) { m["limits"].(map[string]any)["requestTimeoutMs"] = 150 }, tooladapter.CodeBindTimeout},
		{"hang up", func(ac *adapterConn, f *tooladapter.Frame) { _ = ac.nc.Close() }, nil, tooladapter.CodeConnectionClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdapter(t, tt.hook)
			m := descriptorMap(a.sock)
			if tt.opts != nil {
				tt.opts(m)
			}
			log, lb := captureLogger()
			_, e := Connect(context.Background(), mustDescriptor(t, m), Options{Logger: log})
			wantCode(t, e, tt.code)
			if tt.code == tooladapter.CodeBindTimeout || tt.code == tooladapter.CodeConnectionClosed {
				if !e.Retryable {
					t.Errorf("%s is not retryable", e.Code)
				}
			}
			secretFree(t, "error", errorTexts(e), a.sock)
			secretFree(t, "log", lb.String(), a.sock)
		})
	}
}

// TestBindRefusedSaysSo: an adapter that closes the connection instead of answering bind (as
// airlock-fs refuses a bind no live grant matches) is reported as a refused bind, not as a bare
// "tool adapter closed the connection", which an operator could not act on.
func TestBindRefusedSaysSo(t *testing.T) {
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) { _ = ac.nc.Close() })
	_, e := Connect(context.Background(), mustDescriptor(t, descriptorMap(a.sock)), Options{})
	wantCode(t, e, tooladapter.CodeConnectionClosed)
	if !e.Retryable || !strings.Contains(e.Message, "without answering bind") || !strings.Contains(e.Message, "grant") {
		t.Fatalf("refused bind: %+v", e)
	}
}

func TestConnectFailures(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		dir := shortRoot(t)
		sock := filepath.Join(dir, "gone.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		_ = os.Chmod(sock, 0o600)
		_ = ln.Close()
		_, e := Connect(context.Background(), mustDescriptor(t, descriptorMap(sock)), Options{})
		wantCode(t, e, tooladapter.CodeConnectionFailed)
		secretFree(t, "error", errorTexts(e), sock)
	})
	t.Run("timeout", func(t *testing.T) {
		a := newAdapter(t, nil)
		saved := dial
		dial = func(ctx context.Context, _ string) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		defer func() { dial = saved }()
		m := descriptorMap(a.sock)
		m["limits"].(map[string]any)["requestTimeoutMs"] = 100
		_, e := Connect(context.Background(), mustDescriptor(t, m), Options{})
		wantCode(t, e, tooladapter.CodeConnectTimeout)
		if !e.Retryable {
			t.Error("connect timeout is not retryable")
		}
	})
	t.Run("cancelled during bind", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
			if f.Kind == tooladapter.KindBind {
				cancel() // and never answer
			}
		})
		defer cancel()
		_, e := Connect(ctx, mustDescriptor(t, descriptorMap(a.sock)), Options{})
		wantCode(t, e, tooladapter.CodeConnectionFailed)
		if !e.Retryable {
			t.Error("a cancelled connect is retryable")
		}
	})
	t.Run("insecure socket mode", func(t *testing.T) {
		a := newAdapter(t, nil)
		if err := os.Chmod(a.sock, 0o666); err != nil {
			t.Fatal(err)
		}
		_, e := Connect(context.Background(), mustDescriptor(t, descriptorMap(a.sock)), Options{})
		wantCode(t, e, tooladapter.CodeEndpointInsecure)
		secretFree(t, "error", errorTexts(e), a.sock)
	})
}

// TestIdentityDrift: an inbound frame with any other identity member ends the connection.
func TestIdentityDrift(t *testing.T) {
	tests := []struct {
		member string
		mut    func(*tooladapter.Frame)
		code   string
	}{
		{"adapterId", func(f *tooladapter.Frame) { f.AdapterID = "other-fs" }, tooladapter.CodeIdentityMismatch},
		{"adapterVersion", func(f *tooladapter.Frame) { f.AdapterVersion = "1.2.0-rc.1" }, tooladapter.CodeIdentityMismatch},
		{"hostInstanceId", func(f *tooladapter.Frame) { f.HostInstanceID = "host-old" }, tooladapter.CodeBindingMismatch},
		{"sessionId", func(f *tooladapter.Frame) { f.SessionID = "agent-b" }, tooladapter.CodeBindingMismatch},
		{"generation", func(f *tooladapter.Frame) { f.Generation = 1 }, tooladapter.CodeBindingMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.member, func(t *testing.T) {
			a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
				switch f.Kind {
				case tooladapter.KindBind:
					ac.sendFrame(boundFor(f))
				case tooladapter.KindInvoke:
					r := ok(f, resultData(f.Operation, 1))
					tt.mut(r)
					ac.sendFrame(r)
				}
			})
			c, _ := connect(t, a, descriptorMap(""), Options{})
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k1", statReq(1))
			wantCode(t, e, tt.code)
			wantIndeterminate(t, e, true)
			if got := c.Err(); got == nil || got.Code != tt.code || got.Details[tooladapter.DetailField] != tt.member {
				t.Fatalf("Err() = %v %v, want %s naming %s", got, got.Details, tt.code, tt.member)
			}
			_, e = c.Invoke(context.Background(), tooladapter.OpStat, "k2", statReq(1))
			wantCode(t, e, tooladapter.CodeSessionClosed)
			if e.Details[detailCause] != tt.code {
				t.Fatalf("cause = %v", e.Details[detailCause])
			}
		})
	}
}

// TestHandleReflection: an inbound line holding the handle anywhere ends the connection, and
// neither the handle nor the socket path reaches an error or a log line.
func TestHandleReflection(t *testing.T) {
	lines := map[string]func(f *tooladapter.Frame) string{
		"in an error message": func(f *tooladapter.Frame) string {
			return fmt.Sprintf(`{"protocolVersion":"1.0","kind":"result","adapterId":"owner-filesystem","adapterVersion":"1.2.0","hostInstanceId":"host-019f","sessionId":"agent-a","generation":2,"requestId":%q,"idempotencyKey":%q,"operation":"fs.stat","ok":false,"error":{"code":"leak","message":"handle %s","retryable":false}}`, f.RequestID, f.IdempotencyKey, testHandle)
		},
		"as a key": func(f *tooladapter.Frame) string {
			return `{"` + testHandle + `":1}`
		},
		"inside a longer token": func(f *tooladapter.Frame) string {
			return `{"protocolVersion":"1.0","kind":"revoked","x":"zz` + testHandle + `zz"}`
		},
		"JSON-escaped in result data": func(f *tooladapter.Frame) string {
			r := ok(f, json.RawMessage(`{"content":"x","bytesRead":1,"eof":true}`))
			r.Operation = tooladapter.OpRead
			b, _ := marshalFrame(r)
			return strings.Replace(strings.TrimSuffix(string(b), "\n"), `"content":"x"`, `"content":"\u0063`+testHandle[1:]+`"`, 1)
		},
		"in result data": func(f *tooladapter.Frame) string {
			r := ok(f, json.RawMessage(`{"content":"`+testHandle+`","bytesRead":1,"eof":true}`))
			r.Operation = tooladapter.OpRead
			b, _ := marshalFrame(r)
			return strings.TrimSuffix(string(b), "\n")
		},
	}
	for name, line := range lines {
		t.Run(name, func(t *testing.T) {
			a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
				switch f.Kind {
				case tooladapter.KindBind:
					ac.sendFrame(boundFor(f))
				case tooladapter.KindInvoke:
					ac.send(line(f))
				}
			})
			log, lb := captureLogger()
			c, _ := connect(t, a, descriptorMap(""), Options{Logger: log})
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k1", statReq(1))
			wantCode(t, e, tooladapter.CodeSecretReflected)
			wantIndeterminate(t, e, true)
			wantCode(t, c.Err(), tooladapter.CodeSecretReflected)
			_, e2 := c.Invoke(context.Background(), tooladapter.OpStat, "k2", statReq(1))
			c.Close()
			for _, s := range []string{errorTexts(e), errorTexts(c.Err()), errorTexts(e2), lb.String(), string(mustJSON(t, c.Telemetry())), string(mustJSON(t, c.Summary()))} {
				secretFree(t, "output", s, a.sock)
			}
			// A descriptor holds the endpoint, but even printed by mistake it hides the handle.
			secretFree(t, "descriptor", fmt.Sprintf("%v %+v %#v %s", c.d, c.d, c.d, mustJSON(t, c.d)), "")
			if !strings.Contains(lb.String(), tooladapter.CodeSecretReflected) {
				t.Errorf("log does not name the failure: %s", lb.String())
			}
		})
	}
}

// TestCapacityRefusal: with the active slot and the queue full, a request is refused before
// anything is written, with retryAfterMs, and a retry with the same key succeeds later.
func TestCapacityRefusal(t *testing.T) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			wg.Go(func() {
				<-release
				ac.sendFrame(ok(f, resultData(f.Operation, sizeOf(f))))
			})
		}
	})
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"], lim["requestTimeoutMs"] = 1, 1, 2000
	c, ac := connect(t, a, m, Options{})

	type res struct {
		data json.RawMessage
		e    *protocol.Error
	}
	results := make(chan res, 2)
	var callers sync.WaitGroup
	for i := 1; i <= 2; i++ {
		callers.Go(func() {
			d, e := c.Invoke(context.Background(), tooladapter.OpStat, fmt.Sprintf("key-%d", i), statReq(i))
			results <- res{d, e}
		})
		eventually(t, "admission", func() bool { return c.Telemetry().AcceptedRequests == uint64(i) })
	}
	eventually(t, "one active, one queued", func() bool {
		o := c.Telemetry().Occupancy
		return o.ActiveRequests == 1 && o.QueuedRequests == 1
	})
	keyC := IdempotencyKey(tooladapter.OpStat, "tool-call-c")
	_, e := c.Invoke(context.Background(), tooladapter.OpStat, keyC, statReq(3))
	wantCode(t, e, tooladapter.CodeQueueCapacity)
	wantIndeterminate(t, e, false)
	if !e.Retryable || e.Details[tooladapter.DetailRetryAfterMs] != int64(100) {
		t.Fatalf("refusal = %+v, want retryable with retryAfterMs 100", e)
	}
	tel := c.Telemetry()
	if tel.RejectedRequests != 1 || tel.LastRejectionReason != tooladapter.CodeQueueCapacity || !tel.Saturation.Active || tel.Saturation.Count != 1 {
		t.Fatalf("telemetry after refusal = %+v", tel)
	}
	close(release)
	callers.Wait()
	close(results)
	for r := range results {
		if r.e != nil {
			t.Fatal(r.e)
		}
	}
	data, e := c.Invoke(context.Background(), tooladapter.OpStat, keyC, statReq(3))
	if e != nil {
		t.Fatal(e)
	}
	if string(data) != string(resultData(tooladapter.OpStat, 3)) {
		t.Fatalf("retry data = %s", data)
	}
	var keys []string
	for _, f := range ac.received(tooladapter.KindInvoke) {
		keys = append(keys, f.IdempotencyKey)
	}
	if strings.Join(keys, ",") != "key-1,key-2,"+keyC {
		t.Fatalf("adapter saw keys %v: the refused request must not have been written", keys)
	}
	tel = c.Telemetry()
	want := QueueSnapshot{
		Capacity:          QueueCapacity{1, 1},
		HighWater:         QueueCounts{1, 1},
		AcceptedRequests:  3,
		CompletedRequests: 3,
		RejectedRequests:  1,
	}
	if tel.Capacity != want.Capacity || tel.HighWater != want.HighWater || tel.Occupancy != (QueueCounts{}) ||
		tel.AcceptedRequests != 3 || tel.CompletedRequests != 3 || tel.RejectedRequests != 1 ||
		tel.FailedRequests+tel.CancelledRequests+tel.TimedOutRequests != 0 || tel.Saturation.Active || tel.Saturation.Count != 1 {
		t.Fatalf("final telemetry = %+v", tel)
	}
	st := tel.Operations[1]
	if st.Operation != tooladapter.OpStat || st.AcceptedRequests != 3 || st.RejectedRequests != 1 || st.CompletedRequests != 3 || st.QueueWaitMs.Count != 3 || st.RequestLatencyMs.Count != 3 {
		t.Fatalf("fs.stat telemetry = %+v", st)
	}
}

// TestBurst18: 18 concurrent requests through 2 active slots and a 16-deep queue all complete,
// each with its own answer; the 19th is refused.
func TestBurst18(t *testing.T) {
	release := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			wg.Go(func() {
				<-release
				ac.sendFrame(ok(f, resultData(f.Operation, sizeOf(f))))
			})
		}
	})
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"] = 2, 16
	c, ac := connect(t, a, m, Options{})

	got := make([]json.RawMessage, 18)
	errs := make([]*protocol.Error, 18)
	var callers sync.WaitGroup
	for i := range 18 {
		callers.Go(func() {
			got[i], errs[i] = c.Invoke(context.Background(), tooladapter.OpStat, IdempotencyKey(tooladapter.OpStat, fmt.Sprint("call-", i)), statReq(i))
		})
	}
	eventually(t, "2 active and 16 queued", func() bool {
		return c.Telemetry().Occupancy == QueueCounts{ActiveRequests: 2, QueuedRequests: 16}
	})
	_, e := c.Invoke(context.Background(), tooladapter.OpStat, "one-too-many", statReq(99))
	wantCode(t, e, tooladapter.CodeQueueCapacity)
	close(release)
	callers.Wait()
	for i := range 18 {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if string(got[i]) != string(resultData(tooladapter.OpStat, i)) {
			t.Fatalf("request %d got %s", i, got[i])
		}
	}
	keys := map[string]bool{}
	for _, f := range ac.received(tooladapter.KindInvoke) {
		keys[f.IdempotencyKey] = true
	}
	if len(keys) != 18 {
		t.Fatalf("adapter saw %d distinct keys, want 18", len(keys))
	}
	tel := c.Telemetry()
	if tel.CompletedRequests != 18 || tel.AcceptedRequests != 18 || tel.RejectedRequests != 1 || tel.HighWater != (QueueCounts{2, 16}) {
		t.Fatalf("telemetry = %+v", tel)
	}
}

// TestCrossSessionIsolation: one saturated session does not starve another on the same adapter.
func TestCrossSessionIsolation(t *testing.T) {
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			if f.SessionID == "agent-b" {
				ac.sendFrame(ok(f, resultData(f.Operation, sizeOf(f))))
			}
		}
	})
	ma := descriptorMap("")
	la := ma["limits"].(map[string]any)
	la["maxConcurrentRequests"], la["maxQueuedRequests"] = 1, 0
	ca, _ := connect(t, a, ma, Options{})
	mb := descriptorMap("")
	mb["binding"].(map[string]any)["sessionId"] = "agent-b"
	mb["binding"].(map[string]any)["capabilityHandle"] = strings.Repeat("b", 40)
	cb, _ := connect(t, a, mb, Options{})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *protocol.Error, 1)
	go func() {
		_, e := ca.Invoke(ctx, tooladapter.OpStat, "held", statReq(1))
		done <- e
	}()
	eventually(t, "session a saturated", func() bool { return ca.Telemetry().Saturation.Active })
	_, e := ca.Invoke(context.Background(), tooladapter.OpStat, "refused", statReq(2))
	wantCode(t, e, tooladapter.CodeQueueCapacity)
	for i := range 20 {
		if _, e := cb.Invoke(context.Background(), tooladapter.OpStat, fmt.Sprint("b-", i), statReq(i)); e != nil {
			t.Fatalf("session b: %v", e)
		}
	}
	if tb := cb.Telemetry(); tb.CompletedRequests != 20 || tb.RejectedRequests != 0 {
		t.Fatalf("session b telemetry = %+v", tb)
	}
	cancel()
	wantCode(t, <-done, tooladapter.CodeRequestAborted)
}

// TestTargetedAbort: cancelling one active request sends one abort naming it, the request fails
// indeterminate, the other request completes, and the late result is dropped.
func TestTargetedAbort(t *testing.T) {
	var mu sync.Mutex
	held := map[string]*tooladapter.Frame{}
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			mu.Lock()
			held[f.IdempotencyKey] = f
			mu.Unlock()
		case tooladapter.KindAbort:
			r := &tooladapter.Frame{Kind: tooladapter.KindAborted, Identity: f.Identity, RequestID: f.RequestID, TargetRequestID: f.TargetRequestID, Aborted: true}
			ac.sendFrame(r)
		}
	})
	c, ac := connect(t, a, descriptorMap(""), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errA := make(chan *protocol.Error, 1)
	dataB := make(chan json.RawMessage, 1)
	go func() {
		_, e := c.Invoke(ctx, tooladapter.OpStat, "key-a", statReq(1))
		errA <- e
	}()
	go func() {
		d, e := c.Invoke(context.Background(), tooladapter.OpStat, "key-b", statReq(2))
		if e != nil {
			t.Error(e)
		}
		dataB <- d
	}()
	eventually(t, "both invokes at the adapter", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 2 })
	cancel()
	e := <-errA
	wantCode(t, e, tooladapter.CodeRequestAborted)
	wantIndeterminate(t, e, true)
	abort := ac.waitFor(t, tooladapter.KindAbort)
	mu.Lock()
	fa, fb := held["key-a"], held["key-b"]
	mu.Unlock()
	if abort.TargetRequestID != fa.RequestID || abort.RequestID == fa.RequestID {
		t.Fatalf("abort = %+v, want its own id targeting %s", abort, fa.RequestID)
	}
	// The late result of the aborted request is dropped; the other request is unaffected.
	ac.sendFrame(ok(fa, resultData(tooladapter.OpStat, 1)))
	ac.sendFrame(ok(fb, resultData(tooladapter.OpStat, 2)))
	if d := <-dataB; string(d) != string(resultData(tooladapter.OpStat, 2)) {
		t.Fatalf("b got %s", d)
	}
	if c.Err() != nil {
		t.Fatalf("connection failed: %v", c.Err())
	}
	if n := len(ac.received(tooladapter.KindAbort)); n != 1 {
		t.Fatalf("%d abort frames, want 1", n)
	}
	tel := c.Telemetry()
	if tel.CancelledRequests != 1 || tel.CompletedRequests != 1 {
		t.Fatalf("telemetry = %+v", tel)
	}
}

// TestQueuedAbortActiveTimeout: a cancelled queued request is removed without reaching the
// adapter and is not indeterminate; the active request that times out is indeterminate and
// gets exactly one abort.
func TestQueuedAbortActiveTimeout(t *testing.T) {
	a := newAdapter(t, bindOnly)
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"], lim["requestTimeoutMs"] = 1, 1, 400
	c, ac := connect(t, a, m, Options{})

	active := make(chan *protocol.Error, 1)
	go func() {
		_, e := c.Invoke(context.Background(), tooladapter.OpStat, "active", statReq(1))
		active <- e
	}()
	ac.waitFor(t, tooladapter.KindInvoke)
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan *protocol.Error, 1)
	go func() {
		_, e := c.Invoke(ctx, tooladapter.OpStat, "queued", statReq(2))
		queued <- e
	}()
	eventually(t, "one queued", func() bool { return c.Telemetry().Occupancy.QueuedRequests == 1 })
	cancel()
	e := <-queued
	wantCode(t, e, tooladapter.CodeRequestAborted)
	wantIndeterminate(t, e, false)

	e = <-active
	wantCode(t, e, tooladapter.CodeRequestTimeout)
	wantIndeterminate(t, e, true)
	if !e.Retryable {
		t.Fatal("active timeout is not retryable")
	}
	abort := ac.waitFor(t, tooladapter.KindAbort)
	c.Close()
	ac.waitFor(t, tooladapter.KindRevoke)
	inv := ac.received(tooladapter.KindInvoke)
	if len(inv) != 1 || inv[0].IdempotencyKey != "active" {
		t.Fatalf("adapter got %d invokes; the cancelled queued request must not be written", len(inv))
	}
	if n := len(ac.received(tooladapter.KindAbort)); n != 1 || abort.TargetRequestID != inv[0].RequestID {
		t.Fatalf("%d aborts (target %s), want exactly one for %s", n, abort.TargetRequestID, inv[0].RequestID)
	}
	tel := c.Telemetry()
	if tel.CancelledRequests != 1 || tel.TimedOutRequests != 1 || tel.AcceptedRequests != 2 {
		t.Fatalf("telemetry = %+v", tel)
	}
}

// TestWriteBlockedTimeout: when the adapter stops reading, requests that never got onto the
// wire time out retryable and not indeterminate; the one stuck mid-write is indeterminate.
func TestWriteBlockedTimeout(t *testing.T) {
	stall := make(chan struct{})
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		if f.Kind == tooladapter.KindBind {
			ac.sendFrame(boundFor(f))
			<-stall // stop reading: the daemon's writes back up
		}
	})
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"], lim["requestTimeoutMs"] = 1, 1, 500
	lim["maxRequestBytes"] = 4 << 20
	c, _ := connect(t, a, m, Options{})
	t.Cleanup(func() { close(stall) })

	big := json.RawMessage(`{"path":"big","content":"` + strings.Repeat("x", 3<<20) + `"}`)
	first := make(chan *protocol.Error, 1)
	go func() { _, e := c.Invoke(context.Background(), tooladapter.OpWrite, "big", big); first <- e }()
	eventually(t, "big write active", func() bool { return c.Telemetry().Occupancy.ActiveRequests == 1 })
	_, e := c.Invoke(context.Background(), tooladapter.OpStat, "small", statReq(1))
	wantCode(t, e, tooladapter.CodeRequestTimeout)
	wantIndeterminate(t, e, false)
	if !e.Retryable {
		t.Fatal("queued timeout is not retryable")
	}
	e = <-first
	wantCode(t, e, tooladapter.CodeRequestTimeout)
	wantIndeterminate(t, e, true)
}

// TestLateResults: a late result of an aborted request is dropped once; a second copy is a
// fatal mismatch.
func TestLateResults(t *testing.T) {
	var mu sync.Mutex
	var late *tooladapter.Frame
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			if f.IdempotencyKey == "late" {
				mu.Lock()
				late = f
				mu.Unlock()
				return
			}
			ac.sendFrame(ok(f, resultData(f.Operation, 1)))
		}
	})
	c, ac := connect(t, a, descriptorMap(""), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *protocol.Error, 1)
	go func() { _, e := c.Invoke(ctx, tooladapter.OpRead, "late", json.RawMessage(`{"path":"a"}`)); done <- e }()
	ac.waitFor(t, tooladapter.KindInvoke)
	cancel()
	wantCode(t, <-done, tooladapter.CodeRequestAborted)
	abort := ac.waitFor(t, tooladapter.KindAbort)
	mu.Lock()
	f := late
	mu.Unlock()
	ac.sendFrame(&tooladapter.Frame{Kind: tooladapter.KindAborted, Identity: f.Identity, RequestID: abort.RequestID, TargetRequestID: f.RequestID,
		Error: &tooladapter.ErrorBody{Code: "already_done", Message: "finished first", Retryable: false}})
	ac.sendFrame(ok(f, resultData(tooladapter.OpRead, 0)))
	if _, e := c.Invoke(context.Background(), tooladapter.OpStat, "after", statReq(1)); e != nil {
		t.Fatalf("the connection did not survive a dropped late result: %v", e)
	}
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	// The memory forgets an abort once both its acknowledgement and its result arrived, so a
	// second copy of the result matches nothing.
	ac.sendFrame(ok(f, resultData(tooladapter.OpRead, 0)))
	eventually(t, "connection failure", func() bool { return c.Err() != nil })
	wantCode(t, c.Err(), tooladapter.CodeResponseMismatch)
}

// TestAbortedMismatch: an aborted frame must name the abort's own request id.
func TestAbortedMismatch(t *testing.T) {
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindAbort:
			ac.sendFrame(&tooladapter.Frame{Kind: tooladapter.KindAborted, Identity: f.Identity, RequestID: "wrong-id", TargetRequestID: f.TargetRequestID, Aborted: true})
		}
	})
	c, _ := connect(t, a, descriptorMap(""), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *protocol.Error, 1)
	go func() { _, e := c.Invoke(ctx, tooladapter.OpStat, "k", statReq(1)); done <- e }()
	eventually(t, "active", func() bool { return c.Telemetry().Occupancy.ActiveRequests == 1 })
	eventually(t, "written", func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.outbox) == 0 })
	cancel()
	wantCode(t, <-done, tooladapter.CodeRequestAborted)
	eventually(t, "connection failure", func() bool { return c.Err() != nil })
	wantCode(t, c.Err(), tooladapter.CodeResponseMismatch)
}

// TestAbortCapacity: when the abort memory is full, the connection fails.
func TestAbortCapacity(t *testing.T) {
	a := newAdapter(t, bindOnly)
	m := descriptorMap("")
	m["limits"].(map[string]any)["maxIdempotencyKeys"] = 1
	c, ac := connect(t, a, m, Options{})
	for i, want := range []string{tooladapter.CodeRequestAborted, tooladapter.CodeAbortCapacity} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan *protocol.Error, 1)
		go func() { _, e := c.Invoke(ctx, tooladapter.OpStat, fmt.Sprint("k", i), statReq(i)); done <- e }()
		ac.waitFor(t, tooladapter.KindInvoke)
		cancel()
		e := <-done
		wantCode(t, e, want)
		wantIndeterminate(t, e, true)
	}
	wantCode(t, c.Err(), tooladapter.CodeAbortCapacity)
}

// TestMismatchedResult: a result that matches no request in flight ends the connection.
func TestMismatchedResult(t *testing.T) {
	tests := map[string]func(*tooladapter.Frame){
		"unknown request id": func(r *tooladapter.Frame) { r.RequestID = "no-such-request" },
		"other key":          func(r *tooladapter.Frame) { r.IdempotencyKey = "other-key" },
		"other operation": func(r *tooladapter.Frame) {
			r.Operation, r.Data = tooladapter.OpRead, resultData(tooladapter.OpRead, 0)
		},
	}
	for name, mut := range tests {
		t.Run(name, func(t *testing.T) {
			a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
				switch f.Kind {
				case tooladapter.KindBind:
					ac.sendFrame(boundFor(f))
				case tooladapter.KindInvoke:
					r := ok(f, resultData(f.Operation, 1))
					mut(r)
					ac.sendFrame(r)
				}
			})
			c, _ := connect(t, a, descriptorMap(""), Options{})
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k", statReq(1))
			wantCode(t, e, tooladapter.CodeResponseMismatch)
			wantIndeterminate(t, e, true)
			wantCode(t, c.Err(), tooladapter.CodeResponseMismatch)
		})
	}
}

// TestConnectionLoss: when the adapter goes away, active requests fail indeterminate and
// queued ones fail plainly, all retryable.
func TestConnectionLoss(t *testing.T) {
	a := newAdapter(t, bindOnly)
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"] = 2, 2
	c, ac := connect(t, a, m, Options{})
	errs := make(chan *protocol.Error, 4)
	for i := range 4 {
		go func() {
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, fmt.Sprint("k", i), statReq(i))
			errs <- e
		}()
	}
	eventually(t, "2 active, 2 queued", func() bool { return c.Telemetry().Occupancy == QueueCounts{2, 2} })
	eventually(t, "both written", func() bool { return len(ac.received(tooladapter.KindInvoke)) == 2 })
	_ = ac.nc.Close()
	var ind, plain int
	for range 4 {
		e := <-errs
		wantCode(t, e, tooladapter.CodeConnectionClosed)
		if !e.Retryable {
			t.Fatal("connection loss is not retryable")
		}
		if e.Details[tooladapter.DetailIndeterminate] == true {
			ind++
		} else {
			plain++
		}
	}
	if ind != 2 || plain != 2 {
		t.Fatalf("%d indeterminate, %d not; want 2 and 2", ind, plain)
	}
	if tel := c.Telemetry(); tel.FailedRequests != 4 {
		t.Fatalf("telemetry = %+v", tel)
	}
}

// TestRevokeOnClose: Close fails pending work adapter_session_closed and sends revoke.
func TestRevokeOnClose(t *testing.T) {
	a := newAdapter(t, bindOnly)
	m := descriptorMap("")
	lim := m["limits"].(map[string]any)
	lim["maxConcurrentRequests"], lim["maxQueuedRequests"] = 1, 1
	c, ac := connect(t, a, m, Options{})
	errs := make(chan *protocol.Error, 2)
	go func() { _, e := c.Invoke(context.Background(), tooladapter.OpStat, "a", statReq(1)); errs <- e }()
	ac.waitFor(t, tooladapter.KindInvoke)
	go func() { _, e := c.Invoke(context.Background(), tooladapter.OpStat, "b", statReq(2)); errs <- e }()
	eventually(t, "queued", func() bool { return c.Telemetry().Occupancy.QueuedRequests == 1 })
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	e1, e2 := <-errs, <-errs
	wantCode(t, e1, tooladapter.CodeSessionClosed)
	wantCode(t, e2, tooladapter.CodeSessionClosed)
	if e1.Details[tooladapter.DetailIndeterminate] == e2.Details[tooladapter.DetailIndeterminate] {
		t.Fatal("want the active request indeterminate and the queued one not")
	}
	ac.waitFor(t, tooladapter.KindRevoke)
	<-ac.closed // the daemon closed the socket
}

// TestRegistry: one connection per binding; a second open conflicts; generation replacement
// and registry shutdown revoke.
func TestRegistry(t *testing.T) {
	a := newAdapter(t, nil)
	r := NewRegistry()
	m := descriptorMap(a.sock)
	d := mustDescriptor(t, m)
	c, e := r.Open(context.Background(), d, Options{})
	if e != nil {
		t.Fatal(e)
	}
	ac := a.next(t)
	_, e = r.Open(context.Background(), d, Options{})
	wantCode(t, e, tooladapter.CodeSessionConflict)
	if r.Get(testBinding) != c {
		t.Fatal("Get does not return the open connection")
	}
	// Generation replacement: the daemon revokes the old generation and opens the new one.
	m2 := descriptorMap(a.sock)
	m2["binding"].(map[string]any)["generation"] = 3
	d2 := mustDescriptor(t, m2)
	r.Revoke(testBinding)
	ac.waitFor(t, tooladapter.KindRevoke)
	c2, e := r.Open(context.Background(), d2, Options{})
	if e != nil {
		t.Fatal(e)
	}
	ac2 := a.next(t)
	// A failed connection stays visible until replaced, and a new open replaces it.
	_ = ac2.nc.Close()
	eventually(t, "failure", func() bool { return c2.Err() != nil })
	if r.Get(d2.Incarnation()) != c2 {
		t.Fatal("failed connection not visible")
	}
	_, e = c2.Invoke(context.Background(), tooladapter.OpStat, "k", statReq(1))
	wantCode(t, e, tooladapter.CodeSessionClosed)
	if e.Details[detailCause] != tooladapter.CodeConnectionClosed {
		t.Fatalf("cause = %v", e.Details[detailCause])
	}
	if _, e := r.Open(context.Background(), d2, Options{}); e != nil {
		t.Fatal(e)
	}
	ac2 = a.next(t)
	r.Close()
	ac2.waitFor(t, tooladapter.KindRevoke)
	_, e = r.Open(context.Background(), d, Options{})
	wantCode(t, e, tooladapter.CodeRegistryClosed)
}

// TestProtocolViolations: frames the adapter may not send end the connection.
func TestProtocolViolations(t *testing.T) {
	id := `"protocolVersion":"1.0","adapterId":"owner-filesystem","adapterVersion":"1.2.0","hostInstanceId":"host-019f","sessionId":"agent-a","generation":2`
	tests := []struct {
		name string
		line func(f *tooladapter.Frame) string
		code string
	}{
		{"second bound", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"bound","operations":["fs.list","fs.stat","fs.read","fs.search","fs.write","fs.edit"],"limits":{"maxRequestBytes":1048576,"maxResponseBytes":1048576,"maxConcurrentRequests":4,"maxQueuedRequests":16,"requestTimeoutMs":30000,"maxIdempotencyKeys":256,"idempotencyTtlMs":3600000}}`
		}, tooladapter.CodeProtocolInvalid},
		{"adapter-sent bind", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"bind","capabilityHandle":"` + strings.Repeat("Z", 40) + `","operations":["fs.stat"],"limits":{"maxRequestBytes":1048576,"maxResponseBytes":1048576,"maxConcurrentRequests":4,"maxQueuedRequests":16,"requestTimeoutMs":30000,"maxIdempotencyKeys":256,"idempotencyTtlMs":3600000}}`
		}, tooladapter.CodeProtocolInvalid},
		{"adapter-sent invoke", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"invoke","requestId":"x1","idempotencyKey":"k","operation":"fs.stat","payload":{"path":"."}}`
		}, tooladapter.CodeProtocolInvalid},
		{"adapter-sent abort", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"abort","requestId":"x1","targetRequestId":"` + f.RequestID + `"}`
		}, tooladapter.CodeProtocolInvalid},
		{"adapter-sent revoke", func(f *tooladapter.Frame) string { return `{` + id + `,"kind":"revoke"}` }, tooladapter.CodeProtocolInvalid},
		{"malformed", func(f *tooladapter.Frame) string { return `{` + id + `,"kind":"result"` }, tooladapter.CodeProtocolInvalid},
		{"unknown member", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"result","requestId":"` + f.RequestID + `","idempotencyKey":"k","operation":"fs.stat","ok":true,"data":{"type":"file","size":1},"extra":1}`
		}, tooladapter.CodeProtocolInvalid},
		{"invalid result data", func(f *tooladapter.Frame) string {
			return `{` + id + `,"kind":"result","requestId":"` + f.RequestID + `","idempotencyKey":"k","operation":"fs.stat","ok":true,"data":{"type":"socket","size":1}}`
		}, tooladapter.CodeProtocolInvalid},
		{"oversized", func(f *tooladapter.Frame) string { return `{"x":"` + strings.Repeat("y", 4096) + `"}` }, tooladapter.CodeProtocolInvalid},
		{"invalid utf-8", func(f *tooladapter.Frame) string { return "{\"x\":\"\xff\"}" }, tooladapter.CodeProtocolInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
				switch f.Kind {
				case tooladapter.KindBind:
					ac.sendFrame(boundFor(f))
				case tooladapter.KindInvoke:
					ac.sendFrame(&tooladapter.Frame{Kind: tooladapter.KindRevoked, Identity: f.Identity}) // ignored
					ac.send(tt.line(f))
				}
			})
			m := descriptorMap("")
			m["limits"].(map[string]any)["maxResponseBytes"] = 4096
			c, _ := connect(t, a, m, Options{})
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k", statReq(1))
			wantCode(t, e, tt.code)
			wantIndeterminate(t, e, true)
			wantCode(t, c.Err(), tt.code)
		})
	}
}

// TestAdapterError: an adapter's error keeps a well-formed code and its retryable flag; its
// message never passes, and a malformed code becomes adapter_error.
func TestAdapterError(t *testing.T) {
	tests := []struct{ code, want string }{
		{"not_found", "not_found"},
		{"digest_mismatch", "digest_mismatch"},
		{"Not-Found", tooladapter.CodeAdapterError},
		{"x" + strings.Repeat("y", 127), "x" + strings.Repeat("y", 127)},
		{"9lives", tooladapter.CodeAdapterError},
	}
	for _, tt := range tests {
		t.Run(tt.code[:min(len(tt.code), 20)], func(t *testing.T) {
			a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
				switch f.Kind {
				case tooladapter.KindBind:
					ac.sendFrame(boundFor(f))
				case tooladapter.KindInvoke:
					r := reply(f, tooladapter.KindResult)
					r.Error = &tooladapter.ErrorBody{Code: tt.code, Message: "secret detail /home/op/file", Retryable: true}
					ac.sendFrame(r)
				}
			})
			c, _ := connect(t, a, descriptorMap(""), Options{})
			_, e := c.Invoke(context.Background(), tooladapter.OpStat, "k", statReq(1))
			wantCode(t, e, tt.want)
			wantIndeterminate(t, e, false)
			if !e.Retryable || strings.Contains(errorTexts(e), "secret detail") {
				t.Fatalf("error = %+v", e)
			}
			if c.Err() != nil {
				t.Fatal("an adapter error must not end the connection")
			}
			if tel := c.Telemetry(); tel.FailedRequests != 1 {
				t.Fatalf("telemetry = %+v", tel)
			}
		})
	}
}

// TestInvokeAdmission: requests refused before admission write nothing.
func TestInvokeAdmission(t *testing.T) {
	a := newAdapter(t, nil)
	root := shortRoot(t)
	if err := os.MkdirAll(filepath.Join(root, "src"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "src", "a.go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	m := descriptorMap("")
	m["operations"] = []any{"fs.stat", "fs.write"}
	m["limits"].(map[string]any)["maxRequestBytes"] = 2048
	c, ac := connect(t, a, m, Options{Root: root})
	tests := []struct {
		name, op, key, payload, code string
	}{
		{"denied", tooladapter.OpRead, "k", `{"path":"a"}`, tooladapter.CodeOperationDenied},
		{"unknown operation", "shell.exec", "k", `{"path":"a"}`, tooladapter.CodeOperationDenied},
		{"empty key", tooladapter.OpStat, "", `{"path":"a"}`, tooladapter.CodeRequestInvalid},
		{"key with space", tooladapter.OpStat, "a b", `{"path":"a"}`, tooladapter.CodeRequestInvalid},
		{"key too long", tooladapter.OpStat, strings.Repeat("k", 513), `{"path":"a"}`, tooladapter.CodeRequestInvalid},
		{"unknown member", tooladapter.OpStat, "k", `{"path":"a","follow":true}`, tooladapter.CodeRequestInvalid},
		{"missing path", tooladapter.OpStat, "k", `{}`, tooladapter.CodeRequestInvalid},
		{"null payload", tooladapter.OpStat, "k", `null`, tooladapter.CodeRequestInvalid},
		{"bad path", tooladapter.OpStat, "k", `{"path":"../etc"}`, tooladapter.CodeInvalidPath},
		{"symlink", tooladapter.OpStat, "k", `{"path":"link/passwd"}`, tooladapter.CodePathSymlink},
		{"missing", tooladapter.OpStat, "k", `{"path":"src/b.go"}`, tooladapter.CodePathUnavailable},
		{"missing parent for write", tooladapter.OpWrite, "k", `{"path":"nope/b.go","content":""}`, tooladapter.CodePathUnavailable},
		{"too large", tooladapter.OpWrite, "k", `{"path":"src/new.go","content":"` + strings.Repeat("x", 2048) + `"}`, tooladapter.CodeRequestTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := c.Invoke(context.Background(), tt.op, tt.key, json.RawMessage(tt.payload))
			wantCode(t, e, tt.code)
			wantIndeterminate(t, e, false)
		})
	}
	if n := len(ac.received(tooladapter.KindInvoke)); n != 0 {
		t.Fatalf("%d refused requests reached the adapter", n)
	}
	if _, e := c.Invoke(context.Background(), tooladapter.OpWrite, "w", json.RawMessage(`{"path":"src/new.go","content":"x"}`)); e != nil {
		t.Fatalf("write of a new leaf: %v", e)
	}
	if tel := c.Telemetry(); tel.AcceptedRequests != 1 {
		t.Fatalf("telemetry = %+v", tel)
	}
	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, e := c.Invoke(canceled, tooladapter.OpStat, "k", json.RawMessage(`{"path":"src"}`))
	wantCode(t, e, tooladapter.CodeRequestAborted)
}

func TestDuplicateKeyInFlight(t *testing.T) {
	a := newAdapter(t, bindOnly)
	c, ac := connect(t, a, descriptorMap(""), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *protocol.Error, 1)
	go func() { _, e := c.Invoke(ctx, tooladapter.OpStat, "same", statReq(1)); done <- e }()
	ac.waitFor(t, tooladapter.KindInvoke)
	_, e := c.Invoke(context.Background(), tooladapter.OpStat, "same", statReq(1))
	wantCode(t, e, tooladapter.CodeRequestInvalid)
	if !e.Retryable || e.Details[tooladapter.DetailReason] != "duplicate_idempotency_key" {
		t.Fatalf("duplicate = %+v", e)
	}
	cancel()
	wantCode(t, <-done, tooladapter.CodeRequestAborted)
}

func TestIdempotencyKey(t *testing.T) {
	k := IdempotencyKey(tooladapter.OpRead, "call_1")
	if !regexp.MustCompile(`^tool-[a-f0-9]{64}$`).MatchString(k) {
		t.Fatalf("key %q", k)
	}
	if k != IdempotencyKey(tooladapter.OpRead, "call_1") || k == IdempotencyKey(tooladapter.OpStat, "call_1") || k == IdempotencyKey(tooladapter.OpRead, "call_2") {
		t.Fatal("key is not a function of operation and tool call id")
	}
	// The NUL separator keeps ("fs.read", "x") and ("fs.readx", "") apart.
	if IdempotencyKey("a", "bc") == IdempotencyKey("ab", "c") {
		t.Fatal("separator missing")
	}
	if !tooladapter.ValidWireID(k, tooladapter.MaxIdempotencyKeyLen) {
		t.Fatal("key is not a valid wire id")
	}
}

// TestStart: Start returns before the adapter answers; done runs exactly once with what Invoke
// would return: at once for a refusal, on the reader for a result, and on the closing
// goroutine for a request that Close ends.
func TestStart(t *testing.T) {
	var mu sync.Mutex
	var held []*tooladapter.Frame
	a := newAdapter(t, func(ac *adapterConn, f *tooladapter.Frame) {
		switch f.Kind {
		case tooladapter.KindBind:
			ac.sendFrame(boundFor(f))
		case tooladapter.KindInvoke:
			mu.Lock()
			held = append(held, f)
			mu.Unlock()
		}
	})
	c, ac := connect(t, a, descriptorMap(""), Options{})
	type outcome struct {
		data json.RawMessage
		e    *protocol.Error
	}
	start := func(key string) chan outcome {
		ch := make(chan outcome, 2) // room for a second, wrong, call of done
		c.Start(context.Background(), tooladapter.OpStat, key, statReq(1), func(d json.RawMessage, e *protocol.Error) { ch <- outcome{d, e} })
		return ch
	}

	refused := make(chan outcome, 2)
	c.Start(context.Background(), tooladapter.OpStat, "not a key", statReq(1), func(d json.RawMessage, e *protocol.Error) { refused <- outcome{d, e} })
	select {
	case o := <-refused:
		wantCode(t, o.e, tooladapter.CodeRequestInvalid)
		wantIndeterminate(t, o.e, false)
	default:
		t.Fatal("a refusal did not run done before Start returned")
	}

	answered, closed := start("key-a"), start("key-b")
	eventually(t, "both invokes at the adapter", func() bool { mu.Lock(); defer mu.Unlock(); return len(held) == 2 })
	select {
	case o := <-answered:
		t.Fatalf("done ran before the adapter answered: %+v", o)
	default:
	}
	mu.Lock()
	first := held[0]
	mu.Unlock()
	ac.sendFrame(ok(first, resultData(tooladapter.OpStat, 1)))
	o := <-answered
	if o.e != nil || string(o.data) != string(resultData(tooladapter.OpStat, 1)) {
		t.Fatalf("answered = %s %v", o.data, o.e)
	}

	c.Close()
	select {
	case o := <-closed:
		wantCode(t, o.e, tooladapter.CodeSessionClosed)
		wantIndeterminate(t, o.e, true)
	default:
		t.Fatal("Close returned before the done of the request it ended")
	}
	if len(answered)+len(closed)+len(refused) != 0 {
		t.Fatal("done ran twice")
	}
}

// TestCancelAfterDone: a caller that cancels its context in done, once its call has ended (as
// the daemon does), starts no goroutine: the call's cancellation is unregistered before done
// runs. Registered until after done, it ran expire on a goroutine of its own on every call.
func TestCancelAfterDone(t *testing.T) {
	c, _ := connect(t, newAdapter(t, answerAll), descriptorMap(""), Options{})
	call := func(i int) {
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan *protocol.Error, 1)
		c.Start(ctx, tooladapter.OpStat, fmt.Sprintf("key-%d", i), statReq(1), func(_ json.RawMessage, e *protocol.Error) {
			cancel()
			ended <- e
		})
		if e := <-ended; e != nil {
			t.Fatalf("call %d: %v", i, e)
		}
	}
	call(0) // the connection's own goroutines are running
	const calls = 200
	n := daemontest.GoroutinesStarted(func() {
		for i := range calls {
			call(i + 1)
		}
	})
	// The runtime may start a few goroutines of its own meanwhile (a GC's workers).
	if n > calls/10 {
		t.Fatalf("%d calls whose caller cancelled in done started %d goroutines", calls, n)
	}
}
