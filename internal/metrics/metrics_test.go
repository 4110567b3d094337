package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/gate"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts m's endpoint on a free loopback port and returns its base URL.
func serve(t *testing.T, m *Metrics) string {
	t.Helper()
	s, err := NewServer(m, ServerConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	return "http://" + s.Addr()
}

func get(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	code, body := get(t, base+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", code, body)
	}
	return body
}

func mustContain(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, l+"\n") {
			t.Errorf("scrape lacks %q", l)
		}
	}
}

func TestObserveCall(t *testing.T) {
	m := New(nil)
	base := serve(t, m)
	m.ObserveCall(Call{Door: DoorSocket, Operation: "fs.write", Code: CodeOK}, 3*time.Millisecond)
	m.ObserveCall(Call{Door: DoorSocket, Operation: "fs.write", Code: "path_outside_root"}, 40*time.Microsecond)
	m.ObserveCall(Call{Door: DoorRoom, Operation: "invoke", Capability: "desk_lamp", Action: "set_power"}, 2*time.Second)
	m.ObserveCall(Call{Door: DoorMCP, Operation: "fs.read", Code: "policy_denied"}, time.Millisecond)
	// A door or operation outside the known sets is "other", not a new series.
	m.ObserveCall(Call{Door: "/home/me/secret", Operation: "/etc/passwd", Code: CodeOK}, time.Millisecond)
	body := scrape(t, base)
	mustContain(t, body,
		`airlock_calls_total{action="",capability="",code="ok",door="socket",operation="fs.write"} 1`,
		`airlock_calls_total{action="",capability="",code="path_outside_root",door="socket",operation="fs.write"} 1`,
		`airlock_calls_total{action="set_power",capability="desk_lamp",code="ok",door="room",operation="invoke"} 1`,
		`airlock_calls_total{action="",capability="",code="policy_denied",door="mcp",operation="fs.read"} 1`,
		`airlock_calls_total{action="",capability="",code="ok",door="other",operation="other"} 1`,
		`airlock_call_duration_seconds_bucket{action="",capability="",door="socket",operation="fs.write",outcome="error",le="5e-05"} 1`,
		`airlock_call_duration_seconds_bucket{action="",capability="",door="socket",operation="fs.write",outcome="ok",le="0.0025"} 0`,
		`airlock_call_duration_seconds_bucket{action="",capability="",door="socket",operation="fs.write",outcome="ok",le="0.005"} 1`,
		`airlock_call_duration_seconds_bucket{action="set_power",capability="desk_lamp",door="room",operation="invoke",outcome="ok",le="2.5"} 1`,
		`airlock_call_duration_seconds_count{action="",capability="",door="mcp",operation="fs.read",outcome="error"} 1`,
	)
	if strings.Contains(body, "secret") || strings.Contains(body, "passwd") {
		t.Error("a door or operation outside the known sets became a label value")
	}
	// Process and Go runtime collectors are registered.
	if !strings.Contains(body, "\ngo_goroutines ") || !strings.Contains(body, "\nprocess_start_time_seconds ") {
		t.Error("no go_ or process_ metrics")
	}
}

func TestLabelValuesBounded(t *testing.T) {
	m := New(nil)
	base := serve(t, m)
	for i := range MaxLabelValues + 10 {
		m.ObserveCall(Call{Door: DoorSocket, Operation: "invoke", Capability: fmt.Sprintf("cap_%d", i), Action: "go", Code: fmt.Sprintf("code_%d", i)}, time.Millisecond)
	}
	// A value admitted before the bound keeps its own series.
	m.ObserveCall(Call{Door: DoorSocket, Operation: "invoke", Capability: "cap_0", Action: "go", Code: "code_0"}, time.Millisecond)
	body := scrape(t, base)
	mustContain(t, body,
		`airlock_calls_total{action="go",capability="cap_0",code="code_0",door="socket",operation="invoke"} 2`,
		`airlock_calls_total{action="go",capability="other",code="other",door="socket",operation="invoke"} 10`,
	)
	if strings.Contains(body, fmt.Sprintf(`capability="cap_%d"`, MaxLabelValues)) {
		t.Errorf("capability value %d got a series past the bound", MaxLabelValues)
	}
	if n := strings.Count(body, "airlock_calls_total{"); n != MaxLabelValues+1 {
		t.Errorf("%d call series, want %d", n, MaxLabelValues+1)
	}
}

func TestStatusCollector(t *testing.T) {
	st := Status{Sessions: 3, DormantSessions: 1, ActiveTurns: 2, Connections: 5, ApprovalsWaiting: 1,
		Adapters: []Adapter{{Name: "lamp", State: "backoff", Restarts: 4}, {Name: "printer", State: "ready"}},
		Counters: map[string]uint64{"connectionsAccepted": 7}}
	calls := 0
	m := New(func() Status { calls++; return st })
	base := serve(t, m)
	body := scrape(t, base)
	mustContain(t, body,
		`airlock_sessions{residency="resident"} 3`,
		`airlock_sessions{residency="dormant"} 1`,
		`airlock_turns{state="active"} 2`,
		`airlock_turns{state="queued"} 0`,
		`airlock_connections 5`,
		`airlock_approvals_waiting 1`,
		// The queue holds proposals too, not only calls (docs/operations.md).
		`# HELP airlock_approvals_waiting Requests waiting in the approval queue for the operator's decision: calls under ask, room calls of approve-each publications, agents' adapter proposals.`,
		`airlock_adapter_state{adapter="lamp",state="backoff"} 1`,
		`airlock_adapter_state{adapter="lamp",state="ready"} 0`,
		`airlock_adapter_state{adapter="printer",state="ready"} 1`,
		`airlock_adapter_restarts_total{adapter="lamp"} 4`,
		`airlock_host_events_total{event="connectionsAccepted"} 7`,
	)
	if strings.Contains(body, "airlock_room_bus_connected") {
		t.Error("bus state reported without a room service")
	}
	if strings.Contains(body, "airlock_fabric_certificate_expiry_timestamp_seconds{") {
		t.Error("a certificate expiry reported without a fabric")
	}
	if calls != 1 {
		t.Errorf("status read %d times in one scrape, want 1", calls)
	}
	st.Rooms = &Rooms{BusConnected: true, Rooms: 2}
	mustContain(t, scrape(t, base), `airlock_room_bus_connected 1`, `airlock_rooms 2`)
	st.Rooms.BusConnected = false
	mustContain(t, scrape(t, base), `airlock_room_bus_connected 0`)
	st.Fabric = &FabricExpiry{Certificate: time.Unix(1861920000, 0), CA: time.Unix(2114380800, 0)}
	mustContain(t, scrape(t, base),
		`airlock_fabric_certificate_expiry_timestamp_seconds{certificate="node"} 1.86192e+09`,
		`airlock_fabric_certificate_expiry_timestamp_seconds{certificate="ca"} 2.1143808e+09`)
}

func TestAuditAppend(t *testing.T) {
	m := New(nil)
	base := serve(t, m)
	m.ObserveAuditAppend(3, 900, 2*time.Millisecond)
	m.ObserveAuditAppend(1, 300, 200*time.Microsecond)
	mustContain(t, scrape(t, base),
		`airlock_audit_bytes_total 1200`,
		`airlock_audit_records_total 4`,
		`airlock_audit_fsync_duration_seconds_bucket{le="0.00025"} 1`,
		`airlock_audit_fsync_duration_seconds_count 2`,
	)
}

func TestNilMetricsIgnoresObservations(t *testing.T) {
	var m *Metrics
	m.ObserveCall(Call{Door: DoorSocket, Operation: "fs.read"}, time.Millisecond)
	m.ObserveAuditAppend(1, 1, time.Millisecond)
	m.ObserveRoomCall(RoomCall{Door: DoorWeb, Operation: "invoke"}, time.Millisecond)
	m.Hook(nil).After(&gate.Call{}, gate.Outcome{})
}

func TestServerLoopbackOnly(t *testing.T) {
	m := New(nil)
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:9100", "[::]:0", "example.com:9100"} {
		_, err := NewServer(m, ServerConfig{Addr: addr})
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidConfig {
			t.Errorf("%s: %v, want %s", addr, err, CodeInvalidConfig)
		}
	}
	if _, err := NewServer(m, ServerConfig{Addr: "127.0.0.1"}); err == nil {
		t.Error("an address without a port was accepted")
	}
	if _, err := NewServer(m, ServerConfig{Addr: "0.0.0.0:0", AllowNonLoopback: true}); err != nil {
		t.Errorf("non-loopback with AllowNonLoopback: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		if _, err := NewServer(m, ServerConfig{Addr: addr}); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func TestServerRefusesForeignHost(t *testing.T) {
	base := serve(t, New(nil))
	if code, _ := get(t, base+"/metrics", "attacker.example:80"); code != http.StatusMisdirectedRequest {
		t.Errorf("a rebound DNS name: %d, want %d", code, http.StatusMisdirectedRequest)
	}
	port := base[strings.LastIndex(base, ":")+1:]
	if code, _ := get(t, base+"/metrics", "localhost:"+port); code != http.StatusOK {
		t.Errorf("Host localhost: %d", code)
	}
	for _, host := range []string{"127.0.0.1", "[::1]", "localhost", "[::1]:" + port} {
		if code, _ := get(t, base+"/metrics", host); code != http.StatusOK {
			t.Errorf("Host %s: %d", host, code)
		}
	}
	if code, _ := get(t, base+"/metrics", "[::2]"); code != http.StatusMisdirectedRequest {
		t.Errorf("Host [::2]: %d, want %d", code, http.StatusMisdirectedRequest)
	}
	if code, _ := get(t, base+"/", ""); code != http.StatusNotFound {
		t.Errorf("GET /: %d, want 404", code)
	}
}

// BenchmarkObserveCall is the cost a call pays for its metrics (go test -bench ObserveCall).
func BenchmarkObserveCall(b *testing.B) {
	m := New(nil)
	c := Call{Door: DoorSocket, Operation: "invoke", Capability: "desk_lamp", Action: "set_power"}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveCall(c, time.Millisecond)
		}
	})
}

// TestServerBoundsConnections: the endpoint, which any local user can connect to, keeps at
// most MaxConns connections open; one past that is closed at once, and the endpoint answers
// again once a place is free.
func TestServerBoundsConnections(t *testing.T) {
	base := serve(t, New(nil))
	addr := strings.TrimPrefix(base, "http://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Accepted in the order they were queued: this one is the bound's first past.
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(ReadHeaderTimeout / 2))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection past %d: read %v, want it closed", MaxConns, err)
	}
	held[0].Close()
	// The place comes back once the endpoint sees the close: until then a scrape is closed
	// at once, as extra was.
	for deadline := time.Now().Add(ReadHeaderTimeout / 2); ; {
		resp, err := http.Get(base + "/metrics")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /metrics with a place free: %d", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /metrics with a place free: %v", err)
		}
	}
}
