package web

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// startServer runs a real Server on a loopback port and returns it with a logged-in client.
func startServer(t *testing.T, b Backend, logf ...func(string, ...any)) (*Server, *http.Client, string) {
	t.Helper()
	return startServerWith(t, b, JournalHistory(t.TempDir()), logf...)
}

// startServerWith is startServer with the history view of h (an empty journal for
// startServer).
func startServerWith(t *testing.T, b Backend, h History, logf ...func(string, ...any)) (*Server, *http.Client, string) {
	t.Helper()
	cfg := Config{Addr: "127.0.0.1:0", Backend: b, History: h}
	if len(logf) > 0 {
		cfg.Logf = logf[0]
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	jar, _ := cookiejar.New(nil)
	tr := &csrfTransport{base: http.DefaultTransport}
	hc := &http.Client{Jar: jar, Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	u, err := s.LoginURL()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tok, ok := strings.CutPrefix(resp.Request.URL.Fragment, "csrf=")
	if resp.StatusCode != http.StatusOK || resp.Request.URL.RawQuery != "" || !ok || tok == "" {
		t.Fatalf("login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	tr.csrf = tok
	return s, hc, "http://" + s.Addr()
}

// csrfTransport sends the session's CSRF token, which the login's redirect gave, on every
// request that does not set the header itself, as the page's script does.
type csrfTransport struct {
	base http.RoundTripper
	csrf string // set once, after the login
}

func (c *csrfTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if _, set := req.Header[http.CanonicalHeaderKey(CSRFHeader)]; set || c.csrf == "" {
		return c.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set(CSRFHeader, c.csrf)
	return c.base.RoundTrip(req)
}

// stream opens /api/events and reads up to the opening comment.
func stream(t *testing.T, ctx context.Context, hc *http.Client, base string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/events", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	if frame, err := readFrame(r); err != nil || !strings.HasPrefix(frame, ": airlock events") {
		t.Fatalf("opening frame %q, %v", frame, err)
	}
	return resp, r
}

// readFrame reads one SSE frame (lines up to a blank line).
func readFrame(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		if line == "\n" {
			return b.String(), nil
		}
		b.WriteString(line)
	}
}

func TestServerLifecycle(t *testing.T) {
	s, err := New(Config{Addr: "127.0.0.1:0", Backend: newTestBackend()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoginURL(); err == nil {
		t.Error("LoginURL before Start succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	u, err := s.LoginURL()
	if err != nil || !strings.HasPrefix(u, "http://"+s.Addr()+"/login?token=") {
		t.Errorf("LoginURL = %q, %v", u, err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/app.js"); err == nil {
		t.Error("the server still answers after Shutdown")
	}
}

func TestEventsDeliveryAndShutdown(t *testing.T) {
	b := newTestBackend()
	s, hc, base := startServer(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	resp, r := stream(t, ctx, hc, base)
	defer resp.Body.Close()
	if n := b.subscribers(); n != 1 {
		t.Fatalf("%d subscriptions, want 1", n)
	}
	b.publish(Event{Kind: EventCall, Room: "kitchen", Caller: hostA, Provider: hostB, Capability: "living_room_light", Operation: "invoke", Action: "set_color", Outcome: "ok", DurationMs: 4})
	b.publish(Event{Kind: EventApproval, Room: "kitchen", Caller: hostB, Provider: hostA, Capability: "printer", Operation: "invoke", Action: "print", Outcome: "pending"})
	for _, want := range []string{EventCall, EventApproval} {
		frame, err := readFrame(r)
		if err != nil {
			t.Fatal(err)
		}
		name, data, ok := strings.Cut(frame, "\n")
		if !ok || name != "event: "+want || !strings.HasPrefix(data, "data: ") {
			t.Fatalf("frame %q", frame)
		}
		var ev Event
		if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(data), "data: ")), &ev); err != nil || ev.Kind != want || ev.Room != "kitchen" {
			t.Errorf("event %q: %+v %v", data, ev, err)
		}
	}

	// A bounded number of streams: the one past MaxStreams is refused.
	var extra []*http.Response
	for range MaxStreams - 1 {
		resp, _ := stream(t, ctx, hc, base)
		extra = append(extra, resp)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/events", nil)
	over, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	over.Body.Close()
	if over.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("stream %d: %d, want 503", MaxStreams+1, over.StatusCode)
	}

	// Shutdown ends every stream: each reader sees its end, and Shutdown returns.
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := readFrame(r); err == nil {
		t.Error("a stream outlived Shutdown")
	}
	for _, resp := range extra {
		if _, err := readFrame(bufio.NewReader(resp.Body)); err == nil {
			t.Error("a stream outlived Shutdown")
		}
		resp.Body.Close()
	}
	if err := s.Start(); err == nil {
		t.Error("Start after Shutdown succeeded")
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
}

// syncWriter is a ResponseWriter whose body may be read while the handler writes.
type syncWriter struct {
	mu   sync.Mutex
	hdr  http.Header
	body strings.Builder
}

func (w *syncWriter) Header() http.Header { return w.hdr }
func (w *syncWriter) WriteHeader(int)     {}
func (w *syncWriter) Flush()              {}
func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}
func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// openStream opens the event stream of c's login through the handler, as the page does, and
// returns what it writes and a channel closed when it ends.
func openStream(t *testing.T, ctx context.Context, c *client) (*syncWriter, <-chan struct{}) {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, "GET", "http://"+testAddr+"/api/events?csrf="+c.csrf, nil)
	req.AddCookie(c.cookie)
	w := &syncWriter{hdr: make(http.Header)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.h.ServeHTTP(w, req)
	}()
	return w, done
}

// TestEventsEndWithTheLogin: a stream is one long request, and it ends when its login does,
// within a heartbeat: after SessionTTL, and when MaxSessions newer logins end it. Before, a
// stream opened once went on delivering the call log for as long as the connection lasted.
func TestEventsEndWithTheLogin(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, s *Server, h http.Handler)
	}{
		{"expired", func(*testing.T, *Server, http.Handler) { time.Sleep(SessionTTL) }},
		{"ended by newer logins", func(t *testing.T, s *Server, h http.Handler) {
			for range MaxSessions {
				login(t, s, h)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTestBackend()
				s, h := newTestServer(t, b)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				w, done := openStream(t, ctx, login(t, s, h))
				synctest.Wait()
				if !strings.HasPrefix(w.String(), ": airlock events") {
					t.Fatalf("the stream did not open: %q", w.String())
				}
				tc.end(t, s, h)
				time.Sleep(HeartbeatInterval)
				synctest.Wait()
				select {
				case <-done:
				default:
					t.Fatal("the stream goes on after its login ended")
				}
				if n := b.subscribers(); n != 0 {
					t.Errorf("%d subscriptions after the stream ended, want 0", n)
				}
			})
		})
	}
}

// TestEventsHeartbeat counts heartbeats on the synctest clock, and the stream's end when the
// client goes away: the subscription is released.
func TestEventsHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTestBackend()
		s, h := newTestServer(t, b)
		ctx, cancel := context.WithCancel(context.Background())
		w, done := openStream(t, ctx, login(t, s, h))
		synctest.Wait()
		if n := strings.Count(w.String(), ": heartbeat"); n != 0 {
			t.Errorf("%d heartbeats before the interval", n)
		}
		time.Sleep(3 * HeartbeatInterval)
		synctest.Wait()
		if n := strings.Count(w.String(), ": heartbeat"); n != 3 {
			t.Errorf("%d heartbeats after 3 intervals, want 3", n)
		}
		cancel()
		<-done
		synctest.Wait()
		if n := b.subscribers(); n != 0 {
			t.Errorf("%d subscriptions after the client left, want 0", n)
		}
	})
}
