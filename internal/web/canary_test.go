package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCanary drives every route, the failing ones included, and the event stream, and scans
// every answer, header, event and log line for the canary the backend keeps in its state and
// puts in the causes of its errors.
func TestCanary(t *testing.T) {
	b := newTestBackend()
	var (
		logsMu sync.Mutex
		logs   strings.Builder
	)
	_, hc, base := startServer(t, b, func(format string, args ...any) {
		logsMu.Lock()
		defer logsMu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, r := stream(t, ctx, hc, base)
	defer events.Body.Close()

	var seen strings.Builder
	get := func(method, path, body string, withCSRF bool) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Origin", base)
		if withCSRF {
			req.Header.Set(CSRFHeader, csrf(t, hc, base))
		} else {
			req.Header.Set(CSRFHeader, "") // not the client's own
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		fmt.Fprintf(&seen, "%s %s → %d %v %s\n", method, path, resp.StatusCode, resp.Header, data)
	}
	for _, p := range []string{"/", "/app.js", "/app.css", "/api/session", "/api/rooms", "/api/rooms/kitchen", "/api/rooms/nope", "/api/approvals", "/api/remembered", "/missing"} {
		get("GET", p, "", true)
	}
	light := `"room":"kitchen","provider":"` + hostB + `","capability":"living_room_light"`
	for _, c := range []struct{ path, body string }{
		{"/api/observe", "{" + light + "}"},
		{"/api/observe", `{"room":"kitchen","provider":"` + hostA + `","capability":"printer"}`},
		{"/api/invoke", "{" + light + `,"action":"set_color","args":{"color":"red"}}`},
		{"/api/invoke", "{" + light + `,"action":"set_color","args":{"color":"blue"}}`},
		{"/api/invoke", "{" + light + `,"action":"nope","args":{}}`},
		{"/api/decide", `{"id":"nope","approve":false}`},
		{"/api/decide", `{"id":"ap-1","approve":false}`},
		{"/api/forget", `{"id":"nope"}`},
	} {
		get("POST", c.path, c.body, true)
		get("POST", c.path, c.body, false) // refused: no CSRF token
	}
	// Three calls and one decision went out as events (the failures before the adapter
	// are not calls); read them all.
	for range 4 {
		frame, err := readFrame(r)
		if err != nil {
			t.Fatalf("event stream: %v", err)
		}
		if !strings.HasPrefix(frame, ":") {
			seen.WriteString(frame)
		}
	}
	if !strings.Contains(seen.String(), "set_color") || !strings.Contains(seen.String(), "event: approval") {
		t.Fatalf("the scan missed what it should read:\n%s", seen.String())
	}
	if strings.Contains(seen.String(), canary) {
		t.Errorf("the canary reached a page, answer or event:\n%s", seen.String())
	}
	logsMu.Lock()
	defer logsMu.Unlock()
	if logs.Len() == 0 || strings.Contains(logs.String(), canary) {
		t.Errorf("log %q: want the uncoded failure, without the canary", logs.String())
	}
}

// csrf fetches the session's CSRF token.
func csrf(t *testing.T, hc *http.Client, base string) string {
	t.Helper()
	resp, err := hc.Get(base + "/api/session")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	_, v, _ := strings.Cut(string(data), `"csrf":"`)
	tok, _, _ := strings.Cut(v, `"`)
	return tok
}
