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
// calls the tools; a request without the token, with a DNS name as Host, with a foreign
// Origin, or with an oversized body is refused before the MCP handler sees it.
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
