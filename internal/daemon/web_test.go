package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/web"
)

// TestBinaryWebLogin: airlockd --http serves the page; roomUILogin mints a one-time login URL
// that logs in once and appears in no log; the page's API reaches the room service, its errors
// carrying the service's codes. A daemon without --http answers roomUILogin ui_disabled.
func TestBinaryWebLogin(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--http", "127.0.0.1:0"}})
	c := d.Dial()
	roomReady(t, c)
	mustOK(t, c, "createRoom", map[string]any{"room": "home", "title": "Home"})
	var login struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := mustOK(t, c, "roomUILogin", map[string]any{}).Decode(&login); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(login.URL)
	if err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Host, "127.0.0.1:") || u.Path != "/login" ||
		len(u.Query().Get("token")) != 43 {
		t.Fatalf("login URL %q: %v", login.URL, err)
	}
	if until := time.Until(login.ExpiresAt); until <= 0 || until > web.LoginTokenTTL+time.Second {
		t.Fatalf("expiresAt %v", login.ExpiresAt)
	}
	token := u.Query().Get("token")
	origin := "http://" + u.Host

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var csrf string // the login's, from its redirect's fragment
	get := func(path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, origin+path, nil)
		if csrf != "" {
			req.Header.Set(web.CSRFHeader, csrf)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if tok, ok := strings.CutPrefix(resp.Header.Get("Location"), "/#csrf="); ok {
			csrf = tok
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var v any
		_ = json.Unmarshal(body, &v)
		m, _ := v.(map[string]any)
		if list, ok := v.([]any); ok {
			m = map[string]any{"list": list}
		}
		return resp.StatusCode, m
	}
	if code, _ := get("/api/rooms"); code != http.StatusUnauthorized {
		t.Fatalf("rooms before login: %d", code)
	}
	if code, _ := get(u.RequestURI()); code != http.StatusSeeOther {
		t.Fatalf("login: %d", code)
	}
	status, rooms := get("/api/rooms")
	if list, _ := rooms["list"].([]any); status != http.StatusOK || len(list) != 1 || list[0].(map[string]any)["id"] != "home" {
		t.Fatalf("rooms after login: %d %v", status, rooms)
	}
	status, detail := get("/api/rooms/home")
	if members, _ := detail["members"].([]any); status != http.StatusOK || detail["title"] != "Home" || len(members) != 1 {
		t.Fatalf("room detail: %d %v", status, detail)
	}
	if code, e := get("/api/rooms/nowhere"); code < 400 || e["error"].(map[string]any)["code"] != "unknown_room" {
		t.Fatalf("unknown room: %d %v", code, e)
	}
	// The token was for one login.
	jar2, _ := cookiejar.New(nil)
	hc.Jar = jar2
	if code, _ := get(u.RequestURI()); code == http.StatusSeeOther {
		t.Fatal("the login URL worked twice")
	}

	other := daemontest.Start(t, daemontest.Options{})
	oc := other.Dial()
	roomReady(t, oc)
	if r := call(t, oc, client.Command{Operation: "roomUILogin"}); code(r) != daemon.CodeUIDisabled {
		t.Fatalf("roomUILogin without --http: %s", code(r))
	}
	if strings.Contains(d.Stderr(), token) {
		t.Fatal("the daemon logged the login token")
	}
}

// A page address that is not loopback is refused unless explicitly allowed, and so is one
// that does not parse; the daemon does not start.
func TestWebRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"192.0.2.1:0", "nonsense"} {
		dir := daemontest.ShortDir(t)
		_, err := daemon.Start(daemon.Config{SocketPath: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
			Rooms: &daemon.RoomsConfig{}, Web: &daemon.WebConfig{Addr: addr}})
		if err == nil || !strings.Contains(err.Error(), web.CodeInvalidConfig) {
			t.Fatalf("web on %s: %v", addr, err)
		}
	}
}
