package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/airlockhq/airlock/internal/room"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testAddr is the address the handler tests pretend to listen on.
const testAddr = "127.0.0.1:7300"

const testOrigin = "http://" + testAddr

func newTestServer(t *testing.T, b Backend) (*Server, http.Handler) {
	t.Helper()
	s, err := New(Config{Addr: testAddr, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return s, s.Handler()
}

// client drives a handler in process with one session.
type client struct {
	t      *testing.T
	h      http.Handler
	cookie *http.Cookie
	csrf   string
	ctx    context.Context // the requests' context, if set
}

func (c *client) do(method, path, body string, hdr map[string]string) *httptest.ResponseRecorder {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, "http://"+testAddr+path, r)
	if c.ctx != nil {
		req = req.WithContext(c.ctx)
	}
	if method != http.MethodGet {
		req.Header.Set("Origin", testOrigin)
	}
	if c.csrf != "" {
		req.Header.Set(CSRFHeader, c.csrf)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	w := httptest.NewRecorder()
	c.h.ServeHTTP(w, req)
	return w
}

// login exchanges a fresh token, keeping the cookie and the CSRF token of the redirect's
// fragment, as the page's script does.
func login(t *testing.T, s *Server, h http.Handler) *client {
	t.Helper()
	c := &client{t: t, h: h}
	w := c.do(http.MethodGet, "/login?token="+s.MintLoginToken(), "", nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set %d cookies", len(cookies))
	}
	c.cookie = cookies[0]
	tok, ok := strings.CutPrefix(w.Header().Get("Location"), "/#csrf=")
	if !ok || tok == "" {
		t.Fatalf("login redirects to %q, want /#csrf=TOKEN", w.Header().Get("Location"))
	}
	c.csrf = tok
	w = c.do(http.MethodGet, "/api/session", "", nil)
	var sess struct{ CSRF string }
	if err := json.Unmarshal(w.Body.Bytes(), &sess); err != nil || sess.CSRF != tok {
		t.Fatalf("session: %d %s", w.Code, w.Body)
	}
	return c
}

// TestCookieAloneIsNoLogin: a browser sends the session cookie of 127.0.0.1 to every port of
// 127.0.0.1, SameSite=Strict included, so another local user's server on another port gets it
// when the operator's browser visits that port. The cookie alone must then open nothing:
// every API route, reads and the event stream included, also needs the CSRF token, which the
// login hands to the page's origin only (in the redirect's fragment), never in a cookie or an
// answer to the cookie alone. Before, GET /api/session gave the token to the cookie, and the
// stolen cookie approved and invoked.
func TestCookieAloneIsNoLogin(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	owner := login(t, s, h)
	// Done at once, so that a route that lets the thief in answers rather than streams.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	thief := &client{t: t, h: h, cookie: owner.cookie, ctx: done}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/session", ""}, {"GET", "/api/rooms", ""}, {"GET", "/api/rooms/kitchen", ""},
		{"GET", "/api/approvals", ""}, {"GET", "/api/remembered", ""}, {"GET", "/api/events", ""},
		{"GET", "/api/history", ""}, {"HEAD", "/api/session", ""}, {"GET", "/api/events?csrf=", ""},
		{"GET", "/api/rooms?csrf=" + owner.csrf, ""}, // the query is the event stream's alone
		{"POST", "/api/invoke", invokeBody}, {"POST", "/api/decide", `{"id":"ap-1","approve":true}`},
	} {
		w := thief.do(r.method, r.path, r.body, nil)
		if w.Code != http.StatusForbidden {
			t.Errorf("%s %s with the cookie alone: %d %s, want 403", r.method, r.path, w.Code, w.Body)
		}
		if strings.Contains(w.Body.String(), owner.csrf) {
			t.Errorf("%s %s gave the cookie alone the CSRF token", r.method, r.path)
		}
	}
	if w := owner.do("GET", "/api/rooms", "", nil); w.Code != http.StatusOK {
		t.Errorf("rooms with the cookie and the token: %d %s", w.Code, w.Body)
	}
	// The page itself holds nothing of the host; the cookie shows it.
	if w := thief.do("GET", "/", "", nil); w.Code != http.StatusOK {
		t.Errorf("the page with the cookie: %d", w.Code)
	}
}

func errorCode(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var b errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("answer %d is not an error body: %q", w.Code, w.Body)
	}
	return b.Error.Code
}

func TestNewRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.168.1.10:8080", ":8080", "example.com:80", "nonsense"} {
		_, err := New(Config{Addr: addr, Backend: newTestBackend()})
		var we *Error
		if !errors.As(err, &we) || we.Code != CodeInvalidConfig {
			t.Errorf("New(%q) = %v, want %s", addr, err, CodeInvalidConfig)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0", "127.0.0.2:9"} {
		if _, err := New(Config{Addr: addr, Backend: newTestBackend()}); err != nil {
			t.Errorf("New(%q): %v", addr, err)
		}
	}
	if _, err := New(Config{Addr: "0.0.0.0:0", AllowNonLoopback: true, Backend: newTestBackend()}); err != nil {
		t.Errorf("explicitly allowed non-loopback: %v", err)
	}
	if _, err := New(Config{Addr: "127.0.0.1:0"}); err == nil {
		t.Error("New without a backend succeeded")
	}
}

func TestLoginCookie(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := &client{t: t, h: h}
	w := c.do(http.MethodGet, "/login?token="+s.MintLoginToken(), "", nil)
	if w.Code != http.StatusSeeOther || !strings.HasPrefix(w.Header().Get("Location"), "/#csrf=") {
		t.Fatalf("login: %d, Location %q", w.Code, w.Header().Get("Location"))
	}
	ck := w.Result().Cookies()[0]
	if ck.Name != SessionCookie || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/" {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/", ck)
	}
	if ck.MaxAge != int(SessionTTL/time.Second) || ck.Expires.IsZero() {
		t.Errorf("cookie MaxAge %d, Expires %v: want the session's lifetime", ck.MaxAge, ck.Expires)
	}
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil || len(raw) != 32 {
		t.Errorf("session id is not 256 random bits: %q", ck.Value)
	}
	if strings.Contains(w.Header().Get("Location"), "token") {
		t.Error("the redirect keeps the token")
	}
}

// TestLoginTokenSingleUseAndExpiry runs the clock under synctest: a token works once, not
// after LoginTokenTTL, and a session ends after SessionTTL.
func TestLoginTokenSingleUseAndExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, h := newTestServer(t, newTestBackend())
		c := &client{t: t, h: h}
		tok := s.MintLoginToken()
		if w := c.do(http.MethodGet, "/login?token="+tok, "", nil); w.Code != http.StatusSeeOther {
			t.Fatalf("first use: %d", w.Code)
		}
		if w := c.do(http.MethodGet, "/login?token="+tok, "", nil); w.Code != http.StatusUnauthorized {
			t.Errorf("second use: %d, want 401", w.Code)
		}
		for _, bad := range []string{"", "x", tok + "x", strings.ToUpper(tok)} {
			if w := c.do(http.MethodGet, "/login?token="+bad, "", nil); w.Code != http.StatusUnauthorized {
				t.Errorf("token %q: %d, want 401", bad, w.Code)
			}
		}

		late := s.MintLoginToken()
		time.Sleep(LoginTokenTTL - time.Second)
		fresh := s.MintLoginToken()
		time.Sleep(time.Second)
		if w := c.do(http.MethodGet, "/login?token="+late, "", nil); w.Code != http.StatusUnauthorized {
			t.Errorf("token after LoginTokenTTL: %d, want 401", w.Code)
		}
		if w := c.do(http.MethodGet, "/login?token="+fresh, "", nil); w.Code != http.StatusSeeOther {
			t.Errorf("token within LoginTokenTTL: %d, want 303", w.Code)
		}

		c = login(t, s, h)
		if w := c.do(http.MethodGet, "/api/rooms", "", nil); w.Code != http.StatusOK {
			t.Fatalf("rooms: %d", w.Code)
		}
		time.Sleep(SessionTTL)
		if w := c.do(http.MethodGet, "/api/rooms", "", nil); w.Code != http.StatusUnauthorized {
			t.Errorf("rooms after SessionTTL: %d, want 401", w.Code)
		}
	})
}

func TestLoginTokensBounded(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	first := s.MintLoginToken()
	for range MaxLoginTokens {
		s.MintLoginToken()
	}
	c := &client{t: t, h: h}
	if w := c.do(http.MethodGet, "/login?token="+first, "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("the oldest of %d tokens: %d, want 401 (dropped)", MaxLoginTokens+1, w.Code)
	}
	sessions := make([]*client, 0, MaxSessions+1)
	for range MaxSessions + 1 {
		sessions = append(sessions, login(t, s, h))
	}
	if w := sessions[0].do(http.MethodGet, "/api/rooms", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("the oldest of %d sessions: %d, want 401 (ended)", MaxSessions+1, w.Code)
	}
	if w := sessions[MaxSessions].do(http.MethodGet, "/api/rooms", "", nil); w.Code != http.StatusOK {
		t.Errorf("the newest session: %d", w.Code)
	}
}

func TestUnauthenticated(t *testing.T) {
	_, h := newTestServer(t, newTestBackend())
	c := &client{t: t, h: h}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/session", ""}, {"GET", "/api/rooms", ""}, {"GET", "/api/rooms/kitchen", ""},
		{"POST", "/api/observe", "{}"}, {"POST", "/api/invoke", "{}"}, {"GET", "/api/approvals", ""},
		{"POST", "/api/decide", "{}"}, {"GET", "/api/events", ""},
	} {
		w := c.do(r.method, r.path, r.body, nil)
		if w.Code != http.StatusUnauthorized || errorCode(t, w) != CodeUnauthenticated {
			t.Errorf("%s %s: %d %s, want 401 %s", r.method, r.path, w.Code, w.Body, CodeUnauthenticated)
		}
	}
	c.cookie = &http.Cookie{Name: SessionCookie, Value: "forged"}
	if w := c.do("GET", "/api/rooms", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("forged cookie: %d", w.Code)
	}
	if w := c.do("GET", "/", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("page without a session: %d", w.Code)
	}
	// The static assets hold nothing of the host; they load before login.
	if w := c.do("GET", "/app.js", "", nil); w.Code != http.StatusOK {
		t.Errorf("app.js: %d", w.Code)
	}
}

const invokeBody = `{"room":"kitchen","provider":"` + hostB + `","capability":"living_room_light","action":"set_color","args":{"color":"red"}}`

// wrongToken is token with its first character changed: always another token (replacing the
// last one with "A" was the same token whenever it already ended in "A", 1 run in 16).
func wrongToken(token string) string {
	c := byte('A')
	if token[0] == c {
		c = 'B'
	}
	return string(c) + token[1:]
}

func TestCSRF(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := login(t, s, h)
	for _, tc := range []struct {
		name, csrf string
	}{{"missing", ""}, {"wrong", wrongToken(c.csrf)}, {"other session's", login(t, s, h).csrf}} {
		hdr := map[string]string{CSRFHeader: tc.csrf}
		for _, path := range []string{"/api/invoke", "/api/observe", "/api/decide"} {
			w := c.do("POST", path, invokeBody, hdr)
			if w.Code != http.StatusForbidden || errorCode(t, w) != CodeForbidden {
				t.Errorf("%s CSRF token on %s: %d %s, want 403", tc.name, path, w.Code, w.Body)
			}
		}
	}
	w := c.do("POST", "/api/invoke", invokeBody, nil)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"color":"red"`) {
		t.Errorf("invoke with the CSRF token: %d %s", w.Code, w.Body)
	}
}

func TestOriginAndHost(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := login(t, s, h)
	for _, origin := range []string{"", "null", "http://evil.example", "http://127.0.0.1:7301", "https://" + testAddr, "http://localhost:7300"} {
		w := c.do("POST", "/api/invoke", invokeBody, map[string]string{"Origin": origin})
		if w.Code != http.StatusForbidden || errorCode(t, w) != CodeForbidden {
			t.Errorf("Origin %q: %d, want 403", origin, w.Code)
		}
	}
	for _, host := range []string{"evil.example", "evil.example:7300", "127.0.0.1:7301", "127.0.0.1"} {
		req := httptest.NewRequest("GET", "/api/rooms", nil)
		req.Host = host
		req.AddCookie(c.cookie)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusForbidden || errorCode(t, w) != CodeForbidden {
			t.Errorf("Host %q: %d, want 403", host, w.Code)
		}
	}
	// localhost names the same server; its own origin is then http://localhost:port.
	req := httptest.NewRequest("POST", "http://localhost:7300/api/invoke", strings.NewReader(invokeBody))
	req.Header.Set("Origin", "http://localhost:7300")
	req.Header.Set(CSRFHeader, c.csrf)
	req.AddCookie(c.cookie)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Errorf("localhost: %d %s", w.Code, w.Body)
	}
}

func TestBodyLimit(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := login(t, s, h)
	big := `{"room":"kitchen","provider":"x","capability":"c","action":"a","args":{"color":"` + strings.Repeat("r", MaxRequestBytes) + `"}}`
	w := c.do("POST", "/api/invoke", big, nil)
	if w.Code != http.StatusRequestEntityTooLarge || errorCode(t, w) != CodeTooLarge {
		t.Errorf("oversized body: %d %s, want 413", w.Code, w.Body)
	}
	for _, body := range []string{"", "{", `{"room":"kitchen","extra":1}`, `{"room":"kitchen"} {}`, `{"room":"kitchen","args":[1]}`} {
		w := c.do("POST", "/api/invoke", body, nil)
		if w.Code != http.StatusBadRequest || errorCode(t, w) != CodeBadRequest {
			t.Errorf("body %q: %d %s, want 400", body, w.Code, w.Body)
		}
	}
	if w := c.do("POST", "/api/decide", `{"id":"ap-1"}`, nil); w.Code != http.StatusBadRequest {
		t.Errorf("decide without approve: %d", w.Code)
	}
}

// TestBodyCaseVariantKeys: a body is decoded as strictly as every other airlock input. With
// encoding/json, which matches keys case-insensitively and keeps the last of duplicates, a
// decide that reads "approve": false approved, and a case variant overrode the room.
func TestBodyCaseVariantKeys(t *testing.T) {
	b := newTestBackend()
	s, h := newTestServer(t, b)
	c := login(t, s, h)
	for _, r := range []struct{ path, body string }{
		{"/api/decide", `{"id":"ap-1","approve":false,"Approve":true}`},
		{"/api/decide", `{"id":"ap-1","approve":false,"approve":true}`},
		{"/api/decide", `{"ID":"ap-1","approve":true}`},
		{"/api/invoke", `{"room":"kitchen","Room":"kitchen","provider":"` + hostB + `","capability":"living_room_light","action":"set_color","args":{"color":"red"}}`},
		{"/api/invoke", `{"room":"kitchen","provider":"` + hostB + `","capability":"living_room_light","action":"set_color","args":{"color":"red","color":"blue"}}`},
		{"/api/forget", `{"Id":"nope"}`},
	} {
		w := c.do("POST", r.path, r.body, nil)
		if w.Code != http.StatusBadRequest || errorCode(t, w) != CodeBadRequest {
			t.Errorf("%s %s: %d %s, want 400 %s", r.path, r.body, w.Code, w.Body, CodeBadRequest)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.decided) != 0 || b.invokes != 0 {
		t.Errorf("refused bodies reached the backend: decided %v, %d invokes", b.decided, b.invokes)
	}
}

func TestSecurityHeaders(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := login(t, s, h)
	for _, path := range []string{"/", "/app.js", "/app.css", "/api/rooms", "/login?token=x", "/nope"} {
		w := c.do("GET", path, "", nil)
		hd := w.Header()
		if got := hd.Get("Content-Security-Policy"); got != contentSecurityPolicy {
			t.Errorf("%s: CSP %q", path, got)
		}
		if hd.Get("X-Content-Type-Options") != "nosniff" || hd.Get("Referrer-Policy") != "no-referrer" || hd.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, hd)
		}
	}
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
		"img-src 'self' data:", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'"} {
		if !strings.Contains(contentSecurityPolicy, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	if w := c.do("GET", "/", "", nil); w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
		t.Errorf("page: %d %s", w.Code, w.Header().Get("Content-Type"))
	}
}

// TestAssetsRenderText pins what the browser test cannot prove for every path: the script
// never turns a string into markup or code, and the page has no inline script or style (the
// CSP would block them anyway).
func TestAssetsRenderText(t *testing.T) {
	js, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function(", "setTimeout('", "href", "src="} {
		if strings.Contains(string(js), bad) {
			t.Errorf("app.js uses %q", bad)
		}
	}
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"<script>", "style=", "<style", "onclick", "onload", "http://", "https://"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
}

func TestBackendErrors(t *testing.T) {
	s, h := newTestServer(t, newTestBackend())
	c := login(t, s, h)
	var logged []string
	s.cfg.Logf = func(format string, args ...any) { logged = append(logged, format) }

	// A coded error shows its code and message, never its cause.
	w := c.do("POST", "/api/invoke", `{"room":"kitchen","provider":"`+hostB+`","capability":"living_room_light","action":"set_color","args":{"color":"blue"}}`, nil)
	if w.Code != http.StatusUnprocessableEntity || errorCode(t, w) != "busy" || !strings.Contains(w.Body.String(), "the light is busy") {
		t.Errorf("coded error: %d %s", w.Code, w.Body)
	}
	// An uncoded one shows only "internal".
	w = c.do("POST", "/api/observe", `{"room":"kitchen","provider":"`+hostA+`","capability":"printer"}`, nil)
	if w.Code != http.StatusInternalServerError || errorCode(t, w) != CodeInternal {
		t.Errorf("uncoded error: %d %s", w.Code, w.Body)
	}
	if len(logged) != 1 {
		t.Errorf("uncoded errors logged %d times, want 1", len(logged))
	}
	w = c.do("GET", "/api/rooms/nope", "", nil)
	if errorCode(t, w) != "unknown_room" {
		t.Errorf("unknown room: %s", w.Body)
	}
	w = c.do("POST", "/api/decide", `{"id":"nope","approve":true}`, nil)
	if errorCode(t, w) != "unknown_approval" {
		t.Errorf("unknown approval: %s", w.Body)
	}

	for _, tc := range []struct {
		err           error
		code, message string
	}{
		{&Error{Code: "x_y", Message: "m"}, "x_y", "m"},
		{errors.Join(errors.New("outer"), &Error{Code: "wrapped", Message: "w"}), "wrapped", "w"},
		{&room.Error{Code: room.CodeApprovalDenied, Remote: true, Detail: "the provider's operator denied the call"}, "approval_denied", "the provider's operator denied the call"},
		{&room.Error{Code: room.CodeBusy}, "busy", "busy"},
		{context.DeadlineExceeded, CodeTimeout, "the request did not finish in time"},
		{errors.New("secret " + canary), CodeInternal, "the request failed"},
	} {
		code, msg := publicError(tc.err)
		if code != tc.code || msg != tc.message {
			t.Errorf("publicError(%v) = %q, %q; want %q, %q", tc.err, code, msg, tc.code, tc.message)
		}
	}
}

func TestRoomFormsAndApprovals(t *testing.T) {
	b := newTestBackend()
	s, h := newTestServer(t, b)
	c := login(t, s, h)
	w := c.do("GET", "/api/rooms/kitchen", "", nil)
	var v struct {
		Capabilities []struct {
			CapabilityID string
			Actions      []struct {
				Name string
				Form Form
			}
		}
	}
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || len(v.Capabilities) != 2 {
		t.Fatalf("room: %d %s", w.Code, w.Body)
	}
	light, printer := v.Capabilities[0].Actions[0].Form, v.Capabilities[1].Actions[0].Form
	if light.Raw || len(light.Fields) != 1 || light.Fields[0].Kind != KindEnum || !light.Fields[0].Required {
		t.Errorf("set_color form: %+v", light)
	}
	if !printer.Raw {
		t.Errorf("print's schema has a pattern; its form must be raw: %+v", printer)
	}
	if w := c.do("POST", "/api/decide", `{"id":"ap-1","approve":true}`, nil); w.Code != http.StatusOK {
		t.Fatalf("decide: %d %s", w.Code, w.Body)
	}
	if approve, ok := b.decision("ap-1"); !ok || !approve {
		t.Errorf("decision %v %v", approve, ok)
	}
	if w := c.do("GET", "/api/approvals", "", nil); strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("approvals after the decision: %s", w.Body)
	}
}

// TestRememberAndForget: an approval with remember reaches the backend's ApproveRemember
// with its pattern, remember without approve or a pattern without remember is refused, the
// memory is listed and forgotten, and a backend's refusal shows its code.
func TestRememberAndForget(t *testing.T) {
	b := newTestBackend()
	b.approvals = append(b.approvals, Approval{ID: "ap-2", Kind: "call", Target: "fs.write", Path: "src/a.go", Who: "mcp client claude", Rememberable: true, Expires: time.Now().Add(time.Minute)})
	s, h := newTestServer(t, b)
	c := login(t, s, h)
	for _, body := range []string{
		`{"id":"ap-2","approve":false,"remember":true}`,
		`{"id":"ap-2","approve":true,"pattern":"src/**"}`,
	} {
		if w := c.do("POST", "/api/decide", body, nil); w.Code != http.StatusBadRequest {
			t.Errorf("decide %s: %d %s", body, w.Code, w.Body)
		}
	}
	if w := c.do("POST", "/api/decide", `{"id":"ap-2","approve":true,"remember":true,"pattern":"["}`, nil); w.Code == http.StatusOK || !strings.Contains(w.Body.String(), "not_rememberable") {
		t.Errorf("a refused pattern: %d %s", w.Code, w.Body)
	}
	if w := c.do("POST", "/api/decide", `{"id":"ap-2","approve":true,"remember":true,"pattern":"src/**"}`, nil); w.Code != http.StatusOK {
		t.Fatalf("remember: %d %s", w.Code, w.Body)
	}
	var mem []Memory
	w := c.do("GET", "/api/remembered", "", nil)
	if err := json.Unmarshal(w.Body.Bytes(), &mem); err != nil || len(mem) != 1 || mem[0].Match != "src/**" {
		t.Fatalf("remembered: %d %s", w.Code, w.Body)
	}
	if w := c.do("POST", "/api/forget", `{"id":"`+mem[0].ID+`"}`, nil); w.Code != http.StatusOK {
		t.Fatalf("forget: %d %s", w.Code, w.Body)
	}
	if w := c.do("POST", "/api/forget", `{"id":"`+mem[0].ID+`"}`, nil); !strings.Contains(w.Body.String(), "unknown_approval") {
		t.Errorf("forget twice: %d %s", w.Code, w.Body)
	}
	if w := c.do("GET", "/api/remembered", "", nil); strings.TrimSpace(w.Body.String()) != "[]" {
		t.Errorf("remembered after forget: %s", w.Body)
	}
}
