package mcp_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/mcp"
)

// The two MCP revisions airlock mcp serves on both transports: the stateless one (SEP-2575)
// and the last one with sessions.
const (
	revStateless = "2026-07-28"
	revSessions  = "2025-11-25"
)

// httpServer serves a bridge of the session over Streamable HTTP on a loopback port, as
// airlock mcp --http does, and returns its URL and token.
func httpServer(t *testing.T, e *env, cfg mcp.Config) (url, token, port string) {
	t.Helper()
	cfg.Socket = e.d.Socket
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := mcp.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	token = mcp.NewToken()
	srv := httptest.NewUnstartedServer(nil)
	_, port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	srv.Config.Handler = b.HTTPHandler(mcp.HTTPConfig{Token: token, Port: port})
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		b.Close()
	})
	return srv.URL + "/mcp", token, port
}

// rawPost posts one JSON-RPC message with the token and the headers given (an empty value
// sends none; with MCP-Protocol-Version, Mcp-Method is the body's method unless given), and
// returns the status, the response's headers and its JSON-RPC message (read from an SSE data line or a
// JSON body).
func rawPost(t *testing.T, url, token, body string, headers map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if _, given := headers["Mcp-Method"]; !given && headers["Mcp-Protocol-Version"] != "" && len(body) < 1<<10 {
		var m struct{ Method string }
		json.Unmarshal([]byte(body), &m)
		req.Header.Set("Mcp-Method", m.Method) // as SEP-2575 requires beside the revision
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var msg map[string]any
	for _, l := range strings.Split(string(data), "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			data = []byte(d)
		}
	}
	json.Unmarshal(data, &msg)
	return resp.StatusCode, resp.Header, msg
}

// metaEnvelope is the _meta a request of the stateless revision carries.
const metaEnvelope = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + revStateless +
	`","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"}}`

// TestHTTPDiscoverOffersBothRevisions: over Streamable HTTP, server/discover of the stateless
// revision lists it and the session revisions, with no session id; tools/list of that
// revision is marked stale at once and private; a request of it that names its revision only in
// _meta is refused for the missing header (-32020), not for the revision; and the bearer
// token and Host checks stand in front of that revision as in front of the other.
func TestHTTPDiscoverOffersBothRevisions(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	url, token, port := httpServer(t, e, mcp.Config{SessionID: "agent", Generation: 1, PollInterval: time.Hour})
	defer http.DefaultClient.CloseIdleConnections()
	modern := map[string]string{"Mcp-Protocol-Version": revStateless}

	status, h, msg := rawPost(t, url, token, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+metaEnvelope+`}}`, modern)
	if status != http.StatusOK || h.Get("Mcp-Session-Id") != "" {
		t.Fatalf("server/discover: status %d, session id %q: %v", status, h.Get("Mcp-Session-Id"), msg)
	}
	var versions []string
	for _, v := range path(msg, "result", "supportedVersions").([]any) {
		versions = append(versions, v.(string))
	}
	if !slices.Contains(versions, revStateless) || !slices.Contains(versions, revSessions) {
		t.Fatalf("server/discover lists %v, want %s and %s", versions, revStateless, revSessions)
	}
	if ttl, scope := path(msg, "result", "ttlMs"), path(msg, "result", "cacheScope"); ttl != 0.0 || scope != "private" {
		t.Errorf("server/discover: ttlMs %v, cacheScope %v", ttl, scope)
	}

	status, h, msg = rawPost(t, url, token, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+metaEnvelope+`}}`, modern)
	if status != http.StatusOK || h.Get("Mcp-Session-Id") != "" || path(msg, "result", "tools", 0, "name") != "fs_stat" {
		t.Fatalf("tools/list: status %d, session id %q: %v", status, h.Get("Mcp-Session-Id"), msg)
	}
	if ttl, scope := path(msg, "result", "ttlMs"), path(msg, "result", "cacheScope"); ttl != 0.0 || scope != "private" {
		t.Errorf("tools/list: ttlMs %v, cacheScope %v", ttl, scope)
	}

	status, _, msg = rawPost(t, url, token, `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{`+metaEnvelope+`}}`, nil)
	if status != http.StatusBadRequest || path(msg, "error", "code") != float64(sdk.CodeHeaderMismatch) {
		t.Errorf("tools/list with the revision in _meta only: status %d: %v", status, msg)
	}

	discover := `{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{` + metaEnvelope + `}}`
	if status, h, _ := rawPost(t, url, "", discover, modern); status != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Errorf("server/discover without the token: status %d", status)
	}
	if status, _, _ := rawPost(t, url, token+"x", discover, modern); status != http.StatusUnauthorized {
		t.Errorf("server/discover with a wrong token: status %d", status)
	}
	if status, _, _ := rawPost(t, url, token, discover, map[string]string{"Mcp-Protocol-Version": revStateless, "Origin": "http://evil.example"}); status != http.StatusForbidden {
		t.Errorf("server/discover from a foreign Origin: status %d", status)
	}
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{`+metaEnvelope+`,"x":"`+strings.Repeat("a", mcp.MaxMessageBytes)+`"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Protocol-Version", revStateless)
	req.Header.Set("Mcp-Method", "tools/list")
	req.Host = "evil.example:" + port
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a rebinding Host: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	// Oversized, without the header: refused while the body is read to look for the revision.
	big := `{"jsonrpc":"2.0","id":6,"method":"ping","params":{"x":"` + strings.Repeat("a", mcp.MaxMessageBytes) + `"}}`
	if status, _, _ := rawPost(t, url, token, big, nil); status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body without the header: status %d", status)
	}
	if status, _, _ := rawPost(t, url, token, big, modern); status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body of the stateless revision: status %d", status)
	}
}

// TestHTTPStatelessHeaders pins the headers a request of the stateless revision needs over
// Streamable HTTP, as docs/mcp.md lists them (the go-sdk's standard-header check, SEP-2243):
// every request and notification an Mcp-Method naming its method; tools/call besides an
// Mcp-Name naming the tool; each refused 400, -32020, when missing or different from the
// body. The session revisions need neither.
func TestHTTPStatelessHeaders(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat,fs.list"))
	url, token, _ := httpServer(t, e, mcp.Config{SessionID: "agent", Generation: 1, PollInterval: time.Hour})
	defer http.DefaultClient.CloseIdleConnections()
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + metaEnvelope + `}}`
	discover := `{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{` + metaEnvelope + `}}`
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + metaEnvelope + `,"name":"fs_stat","arguments":{"path":"."}}}`
	cancelled := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{` + metaEnvelope + `,"requestId":99}}`
	for _, c := range []struct {
		name    string
		body    string
		headers map[string]string
		status  int
	}{
		{"tools/list with Mcp-Method", list, nil, http.StatusOK},
		{"tools/list without Mcp-Method", list, map[string]string{"Mcp-Method": ""}, http.StatusBadRequest},
		{"tools/list with another Mcp-Method", list, map[string]string{"Mcp-Method": "tools/call"}, http.StatusBadRequest},
		{"server/discover without Mcp-Method", discover, map[string]string{"Mcp-Method": ""}, http.StatusBadRequest},
		{"tools/call with Mcp-Method and Mcp-Name", call, map[string]string{"Mcp-Name": "fs_stat"}, http.StatusOK},
		{"tools/call without Mcp-Name", call, nil, http.StatusBadRequest},
		{"tools/call with another Mcp-Name", call, map[string]string{"Mcp-Name": "fs_list"}, http.StatusBadRequest},
		{"tools/call with Mcp-Name but no Mcp-Method", call, map[string]string{"Mcp-Name": "fs_stat", "Mcp-Method": ""}, http.StatusBadRequest},
		{"a notification without Mcp-Method", cancelled, map[string]string{"Mcp-Method": ""}, http.StatusBadRequest},
		{"a notification with Mcp-Method", cancelled, nil, http.StatusAccepted},
	} {
		headers := map[string]string{"Mcp-Protocol-Version": revStateless}
		for k, v := range c.headers {
			headers[k] = v
		}
		status, _, msg := rawPost(t, url, token, c.body, headers)
		if status != c.status {
			t.Errorf("%s: status %d, want %d: %v", c.name, status, c.status, msg)
			continue
		}
		switch {
		case status == http.StatusBadRequest && path(msg, "error", "code") != float64(sdk.CodeHeaderMismatch):
			t.Errorf("%s: %v, want error %d", c.name, msg, sdk.CodeHeaderMismatch)
		case status == http.StatusOK && path(msg, "result") == nil:
			t.Errorf("%s: %v, want a result", c.name, msg)
		}
	}
}

// TestHTTPGoSDKBothRevisions connects the go-sdk client over Streamable HTTP pinned to each
// revision: it negotiates that revision, lists the tools and calls one, and learns that the
// list changed (a capability's adapter removed, then registered again) — on the session's
// stream under 2025-11-25, on a subscriptions/listen stream under 2026-07-28.
func TestHTTPGoSDKBothRevisions(t *testing.T) {
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.stat"))
	e.registerLamp(t)
	url, token, _ := httpServer(t, e, mcp.Config{SessionID: "agent", Generation: 1, Capabilities: []string{"desk_lamp"}, PollInterval: 100 * time.Millisecond})
	defer http.DefaultClient.CloseIdleConnections()
	for _, rev := range []string{revStateless, revSessions} {
		t.Run(rev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			notes := make(chan struct{}, 16)
			cl := sdk.NewClient(&sdk.Implementation{Name: "revisions", Version: "1"}, &sdk.ClientOptions{
				ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { notes <- struct{}{} },
			})
			hc := &http.Client{Transport: bearer{token, &http.Transport{}}}
			defer hc.CloseIdleConnections()
			cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &sdk.ClientSessionOptions{ProtocolVersion: rev})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if got := cs.InitializeResult().ProtocolVersion; got != rev {
				t.Fatalf("negotiated %q, want %q", got, rev)
			}
			if (cs.ID() == "") != (rev == revStateless) {
				t.Errorf("session id %q under %s", cs.ID(), rev)
			}
			names := func() []string {
				res, err := cs.ListTools(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, tl := range res.Tools {
					out = append(out, tl.Name)
				}
				slices.Sort(out)
				return out
			}
			if got := names(); len(got) != 4 || !slices.Contains(got, "fs_stat") || !slices.Contains(got, "desk_lamp_observe") {
				t.Fatalf("tools/list: %v", got)
			}
			r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "fs_stat", Arguments: map[string]any{"path": "."}})
			if err != nil || r.IsError || structured(t, r)["type"] != "directory" {
				t.Fatalf("tools/call: %v %v", err, r)
			}
			if r := call(t, e.c, client.Command{Operation: "removeAdapter", Payload: map[string]any{"name": "lamp"}}); !r.OK {
				t.Fatal(r.Err())
			}
			select {
			case <-notes:
			case <-ctx.Done():
				t.Fatal("no notifications/tools/list_changed after removeAdapter")
			}
			if got := names(); !slices.Equal(got, []string{"fs_stat"}) {
				t.Fatalf("tools/list after removeAdapter: %v", got)
			}
			e.registerLamp(t)
			select {
			case <-notes:
			case <-ctx.Done():
				t.Fatal("no notifications/tools/list_changed after registerAdapter")
			}
			if got := names(); len(got) != 4 {
				t.Fatalf("tools/list after registerAdapter: %v", got)
			}
		})
	}
}

// TestHTTPStatelessCancelAbortsTheAdapterCall: under 2026-07-28 over Streamable HTTP a call is
// its POST, and a client that cancels it closes that request: the bridge cancels the call and
// the adapter receives the abort frame of exactly that request, as notifications/cancelled
// does for the session revisions.
func TestHTTPStatelessCancelAbortsTheAdapterCall(t *testing.T) {
	e := startEnv(t)
	a := startScripted(t)
	e.open(t, "agent", e.root, scriptedDescriptor(a.socket, e.host, "agent", "fs.write"))
	url, token, _ := httpServer(t, e, mcp.Config{SessionID: "agent", Generation: 1, PollInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{token, &http.Transport{}}}
	defer hc.CloseIdleConnections()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "cancel", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &sdk.ClientSessionOptions{ProtocolVersion: revStateless})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != revStateless {
		t.Fatalf("negotiated %q", v)
	}
	callCtx, cancelCall := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(callCtx, &sdk.CallToolParams{Name: "fs_write", Arguments: map[string]any{"path": "f.txt", "content": "x", "create": true}})
		errc <- err
	}()
	waitFor(t, "the invoke", func() bool { return len(a.framesOf("invoke")) == 1 })
	cancelCall()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	waitFor(t, "the abort", func() bool { return len(a.framesOf("abort")) == 1 })
	if ab, inv := a.framesOf("abort")[0], a.framesOf("invoke")[0]; ab["targetRequestId"] != inv["requestId"] {
		t.Fatalf("abort targets %v, the invoke was %v", ab["targetRequestId"], inv["requestId"])
	}
	a.unblock()
}
