package mcp_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/mcp"
)

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// TestHTTP serves the bridge over Streamable HTTP: a go-sdk client with the token lists and
// calls the tools; a request without the token (the Bearer scheme in any case), with a DNS
// name or, on a loopback connection, an address that is not loopback as Host or in Origin,
// at a path other than /mcp, or with an oversized body is refused before the MCP handler sees
// it. localhost is a host name in any case, in Host as in Origin.
func TestHTTP(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mcp.New(ctx, mcp.Config{Socket: e.d.Socket, SessionID: "agent", Generation: 1, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	token := mcp.NewToken()
	srv := httptest.NewUnstartedServer(nil)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	srv.Config.Handler = b.HTTPHandler(mcp.HTTPConfig{Token: token, Port: port})
	srv.Start()
	defer srv.Close()
	url := srv.URL + "/mcp"

	cl := sdk.NewClient(&sdk.Implementation{Name: "http-test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "fs_stat" {
		t.Fatalf("tools/list over HTTP: %v %v", err, res)
	}
	r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_stat", Arguments: map[string]any{"path": "."}})
	if err != nil || r.IsError {
		t.Fatalf("tools/call over HTTP: %v %v", err, r)
	}
	cs.Close()

	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, c := range []struct {
		name   string
		mutate func(*http.Request)
		body   string
		status int
	}{
		{"no token", func(r *http.Request) { r.Header.Del("Authorization") }, body, http.StatusUnauthorized},
		{"wrong token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") }, body, http.StatusUnauthorized},
		{"rebinding host", func(r *http.Request) { r.Host = "evil.example:" + port }, body, http.StatusForbidden},
		{"other port", func(r *http.Request) { r.Host = "127.0.0.1:1" }, body, http.StatusForbidden},
		{"foreign origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, body, http.StatusForbidden},
		{"null origin", func(r *http.Request) { r.Header.Set("Origin", "null") }, body, http.StatusForbidden},
		{"oversized body", func(*http.Request) {}, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", mcp.MaxMessageBytes) + `"}}`, http.StatusRequestEntityTooLarge},
		{"good", func(r *http.Request) { r.Header.Set("Origin", "http://localhost:"+port) }, body, http.StatusOK},
		{"bearer in lower case", func(r *http.Request) { r.Header.Set("Authorization", "bearer "+token) }, body, http.StatusOK},
		{"BEARER and two spaces", func(r *http.Request) { r.Header.Set("Authorization", "BEARER  "+token) }, body, http.StatusOK},
		{"another scheme", func(r *http.Request) { r.Header.Set("Authorization", "Basic "+token) }, body, http.StatusUnauthorized},
		{"the token alone", func(r *http.Request) { r.Header.Set("Authorization", token) }, body, http.StatusUnauthorized},
		{"Bearer and no token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, body, http.StatusUnauthorized},
		{"LOCALHOST as Host", func(r *http.Request) { r.Host = "LOCALHOST:" + port }, body, http.StatusOK},
		{"LOCALHOST in Origin", func(r *http.Request) { r.Header.Set("Origin", "http://LOCALHOST:"+port) }, body, http.StatusOK},
		{"LOCALHOST as Host, another port", func(r *http.Request) { r.Host = "LOCALHOST:1" }, body, http.StatusForbidden},
		{"rebinding host in upper case", func(r *http.Request) { r.Host = "EVIL.EXAMPLE:" + port }, body, http.StatusForbidden},
		{"loopback IPv6 host", func(r *http.Request) { r.Host = "[::1]:" + port }, body, http.StatusOK},
		{"no loopback host on a loopback connection", func(r *http.Request) { r.Host = "192.0.2.1:" + port }, body, http.StatusForbidden},
		{"no loopback origin on a loopback connection", func(r *http.Request) { r.Header.Set("Origin", "http://192.0.2.1:"+port) }, body, http.StatusForbidden},
		{"path /", func(r *http.Request) { r.URL.Path = "/" }, body, http.StatusNotFound},
		{"path /anything", func(r *http.Request) { r.URL.Path = "/anything" }, body, http.StatusNotFound},
		{"path /mcp/", func(r *http.Request) { r.URL.Path = "/mcp/" }, body, http.StatusNotFound},
		{"path /MCP", func(r *http.Request) { r.URL.Path = "/MCP" }, body, http.StatusNotFound},
		{"path / without the token", func(r *http.Request) { r.URL.Path = "/"; r.Header.Del("Authorization") }, body, http.StatusUnauthorized},
		{"a query", func(r *http.Request) { r.URL.RawQuery = "x=1" }, body, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+token)
		c.mutate(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			del, _ := http.NewRequest(http.MethodDelete, url, nil)
			del.Header.Set("Authorization", "Bearer "+token)
			del.Header.Set("Mcp-Session-Id", id)
			if resp, err := http.DefaultClient.Do(del); err == nil {
				resp.Body.Close()
			}
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
