package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/protocol"
)

// These tests run the real airlockd binary on a real socket and speak NDJSON to it.

type line = map[string]any

func call(t *testing.T, c *client.Client, cmd client.Command) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Call(ctx, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Operation, err)
	}
	return r
}

func code(r *client.Response) string {
	if r.OK {
		return ""
	}
	return r.Error.Code
}

func gen(n int64) *int64 { return &n }

func openPayload(cwd string) map[string]any {
	return map[string]any{
		"cwd":     cwd,
		"session": map[string]any{"mode": "new"},
		"resources": map[string]any{
			"extensions": "none", "skills": "none", "promptTemplates": "none",
			"themes": "none", "contextFiles": "none", "tools": "none",
		},
	}
}

func TestBinaryVersionEcho(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	for _, v := range []string{"1.0", "2.0", "2.7", "1.3"} {
		c := d.Dial()
		c.SetVersion(v)
		r := call(t, c, client.Command{Operation: "handshake"})
		if r.ProtocolVersion != v || !r.OK {
			t.Fatalf("handshake %s: got version %q ok=%v", v, r.ProtocolVersion, r.OK)
		}
		var h struct {
			ProtocolVersion           string   `json:"protocolVersion"`
			SupportedVersions         []string `json:"supportedVersions"`
			SupportedProtocolVersions []string `json:"supportedProtocolVersions"`
			Capabilities              struct {
				Operations []string `json:"operations"`
				// Pi Daemon's 2.x flags (issue #23).
				HostToolOperationCount                *int                  `json:"hostToolOperationCount"`
				HostToolAdapterQueueTelemetry         *bool                 `json:"hostToolAdapterQueueTelemetry"`
				HostToolAdapterRecommendedQueueLimits *protocol.QueueLimits `json:"hostToolAdapterRecommendedQueueLimits"`
			} `json:"capabilities"`
		}
		if err := r.Decode(&h); err != nil {
			t.Fatal(err)
		}
		v2 := strings.HasPrefix(v, "2.")
		caps := h.Capabilities
		if v2 {
			if caps.HostToolOperationCount == nil || *caps.HostToolOperationCount != 6 ||
				caps.HostToolAdapterQueueTelemetry == nil || !*caps.HostToolAdapterQueueTelemetry ||
				caps.HostToolAdapterRecommendedQueueLimits == nil ||
				*caps.HostToolAdapterRecommendedQueueLimits != (protocol.QueueLimits{MaxConcurrentRequests: 4, MaxQueuedRequests: 16}) {
				t.Errorf("%s: hostToolOperationCount %v, hostToolAdapterQueueTelemetry %v, hostToolAdapterRecommendedQueueLimits %v; want 6, true, {4 16}",
					v, caps.HostToolOperationCount, caps.HostToolAdapterQueueTelemetry, caps.HostToolAdapterRecommendedQueueLimits)
			}
		} else if caps.HostToolOperationCount != nil || caps.HostToolAdapterQueueTelemetry != nil || caps.HostToolAdapterRecommendedQueueLimits != nil {
			t.Errorf("%s: a 1.x handshake advertises 2.x host tool capabilities", v)
		}
		if got := len(h.SupportedVersions) == 2 && len(h.SupportedProtocolVersions) == 2; got != v2 {
			t.Errorf("%s: supportedVersions %v supportedProtocolVersions %v", v, h.SupportedVersions, h.SupportedProtocolVersions)
		}
		if !v2 && len(h.Capabilities.Operations) != 11 {
			t.Errorf("%s: v1 lists %d operations, want exactly 11", v, len(h.Capabilities.Operations))
		}
		// An error response echoes the version too.
		r = call(t, c, client.Command{Operation: "status", SessionID: "absent"})
		if code(r) != "session_not_found" || r.ProtocolVersion != v {
			t.Fatalf("%s: status of absent session: %s, version %q", v, code(r), r.ProtocolVersion)
		}
	}
}

func TestBinaryFramingErrorsCloseTheConnection(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-line-bytes", "1024"}})
	cases := []struct {
		name, send, code string
		check            func(t *testing.T, details map[string]any)
	}{
		{"line too large", strings.Repeat("x", 2000), "line_too_large", func(t *testing.T, d map[string]any) {
			if d["maxLineBytes"] != 1024.0 || d["actualBytes"] != 2000.0 {
				t.Errorf("details %v, want maxLineBytes 1024 and actualBytes 2000", d)
			}
		}},
		{"invalid json", `{"protocolVersion":"1.0",`, "invalid_json", nil},
		{"invalid utf8", "{\"protocolVersion\":\"1.0\",\"requestId\":\"\xff\xfe\"}", "invalid_utf8", nil},
		{"incompatible major", `{"protocolVersion":"3.0","requestId":"r","operation":"handshake","payload":{}}`, "incompatible_protocol", func(t *testing.T, d map[string]any) {
			if d["received"] != "3.0" {
				t.Errorf("details %v, want received 3.0", d)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRawT(t, d.Socket)
			rc.send(tc.send)
			resp := rc.next()
			e, _ := resp["error"].(map[string]any)
			if e == nil || e["code"] != tc.code || e["retryable"] != false {
				t.Fatalf("got %v, want error %s", resp, tc.code)
			}
			if tc.check != nil {
				d, _ := e["details"].(map[string]any)
				tc.check(t, d)
			}
			rc.expectEOF()
		})
	}
}

func TestBinaryParseErrorsKeepTheConnection(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	rc := dialRawT(t, d.Socket)
	cases := []struct{ send, code, rid, version string }{
		{`{"protocolVersion":"1.0","requestId":"a","operation":"explode","payload":{}}`, "unknown_operation", "a", "1.0"},
		{`{"protocolVersion":"1.0","requestId":"b","operation":"listSessions","payload":{}}`, "unknown_operation", "b", "1.0"},
		{`{"protocolVersion":"1","requestId":"c","operation":"status","payload":{}}`, "invalid_protocol_version", "c", "1.0"},
		{`{"protocolVersion":"2.0","requestId":"d","requestId":"e","operation":"status","payload":{}}`, "invalid_field", "", "2.0"},
		{`{"protocolVersion":"2.0","requestID":"f","operation":"status","payload":{}}`, "invalid_field", "", "2.0"},
		// A payload is forward tolerant: an unknown member is ignored, a duplicated one is not.
		{`{"protocolVersion":"2.0","requestId":"g","operation":"status","payload":{"x":1}}`, "", "g", "2.0"},
		{`{"protocolVersion":"2.0","requestId":"g2","operation":"status","payload":{"x":1,"x":2}}`, "invalid_field", "g2", "2.0"},
		{`{"protocolVersion":"2.0","requestId":"h","operation":"status","payload":{},"futureField":true}`, "", "h", "2.0"},
	}
	for _, tc := range cases {
		rc.send(tc.send)
		resp := rc.next()
		if got := errCodeOf(resp); got != tc.code {
			t.Errorf("%s: code %q, want %q (%v)", tc.send, got, tc.code, resp)
		}
		if resp["protocolVersion"] != tc.version {
			t.Errorf("%s: version %v, want %s", tc.send, resp["protocolVersion"], tc.version)
		}
		rid, _ := resp["requestId"].(string)
		if tc.rid != "" && rid != tc.rid || tc.rid == "" && !strings.HasPrefix(rid, "invalid-") {
			t.Errorf("%s: requestId %q, want %q", tc.send, rid, tc.rid)
		}
	}
}

func TestBinarySocketPermissions(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	fi, err := os.Lstat(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	di, err := os.Lstat(filepath.Dir(d.Socket))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("socket directory mode %v, want 0700", di.Mode().Perm())
	}
	si, err := os.Lstat(filepath.Join(d.StateDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	if si.Mode().Perm() != 0o600 {
		t.Errorf("database mode %v, want 0600", si.Mode().Perm())
	}
}

func TestBinarySecondDaemonRefusesToStart(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	second := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: filepath.Join(daemontest.ShortDir(t), "state"), NoWait: true})
	code, err := second.ExitCode(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code == 0 || !strings.Contains(second.Stderr(), "already active") {
		t.Fatalf("second daemon exit %d, stderr %q; want a refusal naming the active socket", code, second.Stderr())
	}
	// The first daemon is untouched and still answers.
	call(t, d.Dial(), client.Command{Operation: "handshake"})
}

func TestBinaryStaleSocketIsReplaced(t *testing.T) {
	root := daemontest.ShortDir(t)
	sock := filepath.Join(root, "run", "airlockd.sock")
	os.MkdirAll(filepath.Dir(sock), 0o700)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves a socket file nobody answers on
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
	d := daemontest.Start(t, daemontest.Options{Socket: sock})
	call(t, d.Dial(), client.Command{Operation: "handshake"})
}

func TestBinaryRefusesInsecurePaths(t *testing.T) {
	t.Run("state dir writable by others", func(t *testing.T) {
		root := daemontest.ShortDir(t)
		state := filepath.Join(root, "state")
		os.Mkdir(state, 0o755)
		os.Chmod(state, 0o755)
		d := daemontest.Start(t, daemontest.Options{StateDir: state, NoWait: true})
		code, _ := d.ExitCode(20 * time.Second)
		if code == 0 || !strings.Contains(d.Stderr(), "insecure_state_path") {
			t.Fatalf("exit %d, stderr %q; want insecure_state_path", code, d.Stderr())
		}
	})
	t.Run("socket dir writable by others", func(t *testing.T) {
		root := daemontest.ShortDir(t)
		run := filepath.Join(root, "run")
		os.Mkdir(run, 0o777)
		os.Chmod(run, 0o777)
		d := daemontest.Start(t, daemontest.Options{Socket: filepath.Join(run, "s.sock"), NoWait: true})
		code, _ := d.ExitCode(20 * time.Second)
		if code == 0 || !strings.Contains(d.Stderr(), "writable by group or others") {
			t.Fatalf("exit %d, stderr %q", code, d.Stderr())
		}
	})
	t.Run("socket path is a regular file", func(t *testing.T) {
		root := daemontest.ShortDir(t)
		sock := filepath.Join(root, "s.sock")
		os.WriteFile(sock, []byte("not a socket"), 0o600)
		d := daemontest.Start(t, daemontest.Options{Socket: sock, NoWait: true})
		code, _ := d.ExitCode(20 * time.Second)
		if code == 0 || !strings.Contains(d.Stderr(), "not a socket") {
			t.Fatalf("exit %d, stderr %q", code, d.Stderr())
		}
		if b, _ := os.ReadFile(sock); string(b) != "not a socket" {
			t.Fatal("the daemon touched a file that is not its socket")
		}
	})
}

func TestBinaryCorruptStateFailsStartup(t *testing.T) {
	root := daemontest.ShortDir(t)
	state := filepath.Join(root, "state")
	os.Mkdir(state, 0o700)
	garbage := []byte(strings.Repeat("not a database ", 400))
	os.WriteFile(filepath.Join(state, "airlock.db"), garbage, 0o600)
	d := daemontest.Start(t, daemontest.Options{StateDir: state, NoWait: true})
	code, _ := d.ExitCode(20 * time.Second)
	if code == 0 || !strings.Contains(d.Stderr(), "corrupt_state") {
		t.Fatalf("exit %d, stderr %q; want corrupt_state", code, d.Stderr())
	}
	if b, _ := os.ReadFile(filepath.Join(state, "airlock.db")); string(b) != string(garbage) {
		t.Fatal("a corrupt database was modified instead of refused")
	}
}

func TestBinaryGenerationRules(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	cwd := t.TempDir()
	c := d.Dial()
	open := func(g int64, name string) *client.Response {
		p := openPayload(cwd)
		if name != "" {
			p["name"] = name
		}
		return call(t, c, client.Command{Operation: "open", SessionID: "agent-a", Generation: gen(g), Payload: p})
	}
	var res struct {
		Created bool `json:"created"`
		Session struct {
			Generation int64 `json:"generation"`
		} `json:"session"`
	}
	if err := open(2, "").Decode(&res); err != nil || !res.Created {
		t.Fatalf("first open: %v created=%v", err, res.Created)
	}
	if err := open(2, "").Decode(&res); err != nil || res.Created {
		t.Fatalf("same generation, same policy: %v created=%v, want reuse", err, res.Created)
	}
	r := open(1, "")
	if code(r) != "stale_generation" || r.Error.Details["currentGeneration"] != 2.0 || r.Error.Details["receivedGeneration"] != 1.0 {
		t.Fatalf("lower generation: %+v", r.Error)
	}
	if r := open(2, "other"); code(r) != "session_policy_conflict" {
		t.Fatalf("same generation, other policy: %s", code(r))
	}

	watcher := d.Dial()
	if r := call(t, watcher, client.Command{Operation: "attach", SessionID: "agent-a", Generation: gen(2)}); !r.OK {
		t.Fatal(r.Err())
	}
	if err := open(3, "other").Decode(&res); err != nil || !res.Created || res.Session.Generation != 3 {
		t.Fatalf("higher generation: %v %+v", err, res)
	}
	ev := nextEvent(t, watcher)
	if ev["event"] != "sessionClosed" || ev["generation"] != 2.0 || data(ev)["reason"] != "replaced" {
		t.Fatalf("old generation's watcher got %v, want sessionClosed (replaced)", ev)
	}
	if r := call(t, watcher, client.Command{Operation: "attach", SessionID: "agent-a", Generation: gen(2)}); code(r) != "stale_generation" {
		t.Fatalf("attach to replaced generation: %s", code(r))
	}
	if r := call(t, c, client.Command{Operation: "close", SessionID: "agent-a", Generation: gen(2)}); code(r) != "stale_generation" {
		t.Fatalf("close of replaced generation: %s", code(r))
	}
}

func TestBinaryEventsReachOnlyAttachedConnections(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	cwd := t.TempDir()
	owner, attached, bystander := d.Dial(), d.Dial(), d.Dial()
	for _, s := range []string{"s1", "s2"} {
		if r := call(t, owner, client.Command{Operation: "open", SessionID: s, Generation: gen(1), Payload: openPayload(cwd)}); !r.OK {
			t.Fatal(r.Err())
		}
	}
	if r := call(t, attached, client.Command{Operation: "attach", SessionID: "s1", Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}
	// An attachment to another generation of the same session is refused, not widened.
	if r := call(t, bystander, client.Command{Operation: "attach", SessionID: "s1", Generation: gen(5)}); code(r) != "session_not_found" {
		t.Fatalf("attach to a generation that is not resident: %s", code(r))
	}
	call(t, owner, client.Command{Operation: "close", SessionID: "s2", Generation: gen(1)})
	call(t, owner, client.Command{Operation: "close", SessionID: "s1", Generation: gen(1)})

	ev := nextEvent(t, attached)
	if ev["event"] != "sessionClosed" || ev["sessionId"] != "s1" || ev["sequence"] != 1.0 || ev["hostInstanceId"] != hostID(t, owner) {
		t.Fatalf("attached connection got %v", ev)
	}
	// Each connection answers a status after the closes; events would have come first.
	for _, c := range []*client.Client{owner, bystander, attached} {
		call(t, c, client.Command{Operation: "status"})
		select {
		case ev := <-c.Events():
			t.Fatalf("unexpected event %s", ev)
		default:
		}
	}
}

func nextEvent(t *testing.T, c *client.Client) line {
	t.Helper()
	select {
	case raw, ok := <-c.Events():
		if !ok {
			t.Fatal("connection closed while waiting for an event")
		}
		var ev line
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
}

func TestBinaryKill9KeepsTheCatalog(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	cwd := t.TempDir()
	c := d.Dial()
	want := map[string]int64{"alpha": 1, "beta": 4, "gamma": 2}
	for id, g := range want {
		p := openPayload(cwd)
		if id == "gamma" {
			p["session"] = map[string]any{"mode": "memory"}
		}
		if r := call(t, c, client.Command{Operation: "open", SessionID: id, Generation: gen(g), Payload: p}); !r.OK {
			t.Fatal(r.Err())
		}
	}
	before := listSessions(t, c)
	d.Kill9()

	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c2 := d2.Dial()
	after := listSessions(t, c2)
	if len(after) != len(want) {
		t.Fatalf("after restart %d sessions, want %d", len(after), len(want))
	}
	for _, rec := range after {
		id := rec["sessionId"].(string)
		// Durable sessions are restored on their transcripts; a memory session has nothing
		// to restore and stays dormant.
		residency := "resident"
		if id == "gamma" {
			residency = "dormant"
		}
		if rec["residency"] != residency || rec["generation"] != float64(want[id]) {
			t.Errorf("%s after restart: residency %v generation %v", id, rec["residency"], rec["generation"])
		}
		// A restored session's record is unchanged; the memory session's became dormant.
		grew := rec["revision"].(float64) > before[id]["revision"].(float64)
		if rec["policyDigest"] != before[id]["policyDigest"] || grew != (id == "gamma") {
			t.Errorf("%s: policy digest or revision not carried over: %v -> %v", id, before[id], rec)
		}
	}
	// The restored session is reused with the same policy at the same generation; the
	// dormant memory session comes back as a new runtime.
	var res struct {
		Created bool `json:"created"`
	}
	r := call(t, c2, client.Command{Operation: "open", SessionID: "alpha", Generation: gen(1), Payload: openPayload(cwd)})
	if err := r.Decode(&res); err != nil || res.Created {
		t.Fatalf("reopen restored alpha: %v %+v", err, res)
	}
	mem := openPayload(cwd)
	mem["session"] = map[string]any{"mode": "memory"}
	r = call(t, c2, client.Command{Operation: "open", SessionID: "gamma", Generation: gen(2), Payload: mem})
	if err := r.Decode(&res); err != nil || !res.Created {
		t.Fatalf("reopen dormant gamma: %v %+v", err, res)
	}
	if r := call(t, c2, client.Command{Operation: "open", SessionID: "beta", Generation: gen(3), Payload: openPayload(cwd)}); code(r) != "stale_generation" {
		t.Fatalf("stale generation after restart: %s", code(r))
	}
}

func listSessions(t *testing.T, c *client.Client) map[string]line {
	t.Helper()
	var page struct {
		Sessions []line `json:"sessions"`
	}
	if err := call(t, c, client.Command{Operation: "listSessions"}).Decode(&page); err != nil {
		t.Fatal(err)
	}
	out := map[string]line{}
	for _, s := range page.Sessions {
		out[s["sessionId"].(string)] = s
	}
	return out
}

func TestBinaryCapacityAndDrain(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-sessions", "2"}})
	cwd := t.TempDir()
	c := d.Dial()
	for i, s := range []string{"a", "b"} {
		if r := call(t, c, client.Command{Operation: "open", SessionID: s, Generation: gen(int64(i)), Payload: openPayload(cwd)}); !r.OK {
			t.Fatal(r.Err())
		}
	}
	r := call(t, c, client.Command{Operation: "open", SessionID: "c", Generation: gen(0), Payload: openPayload(cwd)})
	if code(r) != "session_capacity" || !r.Error.Retryable || r.Error.Details["maxSessions"] != 2.0 {
		t.Fatalf("third open: %+v", r.Error)
	}
	if r := call(t, c, client.Command{Operation: "drain", Payload: map[string]any{"timeoutMs": 100}}); !r.OK {
		t.Fatal(r.Err())
	}
	r = call(t, c, client.Command{Operation: "open", SessionID: "d", Generation: gen(0), Payload: openPayload(cwd)})
	if code(r) != "host_draining" || !r.Error.Retryable {
		t.Fatalf("open while draining: %s", code(r))
	}
	var host struct {
		Ready    bool `json:"ready"`
		Draining bool `json:"draining"`
	}
	call(t, c, client.Command{Operation: "status"}).Decode(&host)
	if host.Ready || !host.Draining {
		t.Fatalf("status while draining: %+v", host)
	}
}

func TestBinaryResourcePolicy(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	c.SetVersion("1.0")
	p := openPayload(t.TempDir())
	p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter", "descriptor": map[string]any{}}
	// A 1.x tools member that is not a string is a bad member, as in Pi Daemon's 1.x parser.
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(0), Payload: p}); code(r) != "invalid_field" {
		t.Fatalf("v1 open with tools: %s", code(r))
	}
	p = openPayload(t.TempDir())
	p["resources"].(map[string]any)["skills"] = "all"
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(0), Payload: p}); code(r) != "unsupported_resource_policy" {
		t.Fatalf("v1 open with skills: %s", code(r))
	}
	p = openPayload(filepath.Join(t.TempDir(), "missing"))
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(0), Payload: p}); code(r) != "open_failed" {
		t.Fatalf("open with a missing cwd: %s", code(r))
	}
}

func TestBinaryOversizedRecords(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-response-bytes", "2560", "--max-event-bytes", "2560",
		"--provider", "local=http://127.0.0.1:9/v1"}})
	cwd := t.TempDir()
	c := d.Dial()
	for _, s := range []string{"one", "two", "three", "four", "five"} {
		p := openPayload(cwd)
		p["name"] = strings.Repeat("n", 100)
		p["model"] = map[string]any{"provider": "local", "id": strings.Repeat("m", 200)}
		if r := call(t, c, client.Command{Operation: "open", SessionID: s, Generation: gen(1), Payload: p}); !r.OK {
			t.Fatalf("open %s: %v", s, r.Err())
		}
	}
	r := call(t, c, client.Command{Operation: "status"})
	if code(r) != "outbound_record_too_large" || r.Error.Details["maxBytes"] != 2560.0 {
		t.Fatalf("oversized status: %+v", r)
	}
	// The connection is still usable.
	call(t, c, client.Command{Operation: "status", SessionID: "one"})

	// A session id of 256 four-byte characters appears twice in sessionClosed (envelope and
	// snapshot, with a name of 100 bytes): over 2560 bytes. Its eventDropped replacement names
	// it once and fits. (The limit leaves room for the 2.x handshake, which daemontest's
	// readiness wait reads: 2533 bytes since it lists removeRoomMember.)
	long := strings.Repeat("\U0001D530", 256)
	lp := openPayload(cwd)
	lp["name"] = strings.Repeat("n", 100)
	if r := call(t, c, client.Command{Operation: "open", SessionID: long, Generation: gen(1), Payload: lp}); code(r) != "outbound_record_too_large" {
		t.Fatalf("open of the long session: %+v", r.Error)
	}
	w := d.Dial()
	if r := call(t, w, client.Command{Operation: "attach", SessionID: long, Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}
	call(t, c, client.Command{Operation: "close", SessionID: long, Generation: gen(1)})
	ev := nextEvent(t, w)
	if ev["event"] != "eventDropped" || ev["sequence"] != 1.0 || data(ev)["originalEvent"] != "sessionClosed" {
		t.Fatalf("oversized event replaced by %v", ev)
	}
}

func TestBinaryUnreadOutputClosesTheConnection(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-outbound-bytes-per-connection", "65536", "--max-response-bytes", "4096", "--max-event-bytes", "4096"}})
	nc, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Ask for far more output than the kernel buffers and the outbound bound hold, never
	// reading. The daemon must drop the connection rather than queue without bound.
	req := []byte(`{"protocolVersion":"2.0","requestId":"r","operation":"handshake","payload":{}}` + "\n")
	closed := false
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 200000 && time.Now().Before(deadline); i++ {
		nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		line := []byte(strings.Replace(string(req), `"r"`, `"r`+itoaT(i)+`"`, 1))
		if _, err := nc.Write(line); err != nil {
			closed = true
			break
		}
	}
	if !closed {
		t.Fatal("daemon kept the connection of a client that reads nothing")
	}
	// The daemon itself is fine.
	call(t, d.Dial(), client.Command{Operation: "handshake"})
}

func TestBinarySigtermStopsCleanly(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	c := d.Dial()
	if r := call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(1), Payload: openPayload(t.TempDir())}); !r.OK {
		t.Fatal(r.Err())
	}
	call(t, c, client.Command{Operation: "attach", SessionID: "s", Generation: gen(1)})
	d.Signal(syscall.SIGTERM)
	ev := nextEvent(t, c)
	if ev["event"] != "sessionClosed" || data(ev)["reason"] != "shutdown" {
		t.Fatalf("attached client got %v at shutdown", ev)
	}
	code, err := d.ExitCode(30 * time.Second)
	if err != nil || code != 0 {
		t.Fatalf("exit %d %v\n%s", code, err, d.Stderr())
	}
	if _, err := os.Lstat(d.Socket); !os.IsNotExist(err) {
		t.Fatalf("socket left behind after stop: %v", err)
	}
}

func TestBinaryConnectionCapacity(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-connections", "1"}})
	// The harness's own readiness connection may still be closing: retry until the first
	// connection is the one admitted.
	var first *rawT
	for deadline := time.Now().Add(10 * time.Second); ; {
		first = dialRawT(t, d.Socket)
		if admitted(first) {
			break
		}
		first.nc.Close()
		if time.Now().After(deadline) {
			t.Fatal("no connection admitted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An idle connection makes room for a new one: it is told why and closed.
	second := dialRawT(t, d.Socket)
	if resp := first.next(); errCodeOf(resp) != "connection_evicted" || resp["error"].(map[string]any)["retryable"] != true {
		t.Fatalf("idle first connection got %v, want connection_evicted", resp)
	}
	first.expectEOF()
	if !admitted(second) {
		t.Fatal("the connection that evicted the idle one was not admitted")
	}
	// An attached connection is never evicted: a third connection is refused instead.
	for _, c := range []struct{ rid, line string }{
		{"o", `{"protocolVersion":"1.0","requestId":"o","operation":"open","sessionId":"s","generation":1,"payload":` + mustJSON(t, openPayload(t.TempDir())) + `}`},
		{"at", `{"protocolVersion":"1.0","requestId":"at","operation":"attach","sessionId":"s","generation":1,"payload":{}}`},
	} {
		rid := c.rid
		second.send(c.line)
		if resp := second.next(); errCodeOf(resp) != "" || resp["requestId"] != rid {
			t.Fatalf("%s: %v", rid, resp)
		}
	}
	third := dialRawT(t, d.Socket)
	resp := third.next()
	if errCodeOf(resp) != "connection_capacity" {
		t.Fatalf("third connection got %v", resp)
	}
	third.expectEOF()
	if !admitted(second) {
		t.Fatal("the attached connection did not survive the refused one")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --- raw connection helpers (the in-package ones are not visible to this external package) ---

type rawT struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func dialRawT(t *testing.T, socket string) *rawT {
	t.Helper()
	nc, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawT{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (c *rawT) send(lines ...string) {
	c.t.Helper()
	for _, l := range lines {
		if _, err := c.nc.Write([]byte(l + "\n")); err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *rawT) next() line {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.br.ReadBytes('\n')
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	var m line
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatal(err)
	}
	return m
}

func (c *rawT) expectEOF() {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.br.ReadBytes('\n')
	if err == nil {
		c.t.Fatalf("expected EOF, got %s", b)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatal("connection stayed open")
	}
}

func errCodeOf(resp line) string {
	if resp["ok"] == true {
		return ""
	}
	e, _ := resp["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

func data(m line) map[string]any {
	d, _ := m["data"].(map[string]any)
	return d
}

func itoaT(i int) string { return strconv.Itoa(i) }

func hostID(t *testing.T, c *client.Client) string {
	t.Helper()
	return call(t, c, client.Command{Operation: "handshake"}).HostInstanceID
}

// admitted reports whether a handshake on c succeeds; a connection refused over the limit
// may already be closed when the handshake is written.
func admitted(c *rawT) bool {
	if _, err := c.nc.Write([]byte(`{"protocolVersion":"1.0","requestId":"a","operation":"handshake","payload":{}}` + "\n")); err != nil {
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.br.ReadBytes('\n')
	if err != nil {
		return false
	}
	var m line
	return json.Unmarshal(b, &m) == nil && errCodeOf(m) == ""
}
