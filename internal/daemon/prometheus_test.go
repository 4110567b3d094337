package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/web"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// promTimeout bounds each wait on Prometheus: its start, and the scrapes that bring the values.
// Only a broken setup reaches it; a loaded two-core machine with -race needs some of it.
const promTimeout = 90 * time.Second

// prometheusBinary returns Debian's prometheus, which .ci/run installs: the test skips
// without it, except under CI, where it must run.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is not installed (apt-get install prometheus): %v", err)
		}
		t.Skipf("prometheus is not installed: %v", err)
	}
	return p
}

// scrapeRelay passes Prometheus's scrapes through to airlockd's endpoint unchanged and
// reports each one that was answered, so that the test waits for scrapes rather than for time.
type scrapeRelay struct {
	target  string // airlockd's host:port
	client  *http.Client
	scrapes chan struct{}
}

func (r *scrapeRelay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	out, err := http.NewRequestWithContext(req.Context(), http.MethodGet, "http://"+r.target+req.URL.RequestURI(), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, h := range []string{"Accept", "Accept-Encoding", "X-Prometheus-Scrape-Timeout-Seconds", "User-Agent"} {
		if v := req.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	resp, err := r.client.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Encoding"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, 64<<20))
	select {
	case r.scrapes <- struct{}{}:
	default: // the test is not waiting; it drains before it waits
	}
}

// startPrometheus runs prometheus with a config that scrapes each job's target every second,
// its storage and its listener in dir, and returns its base URL once it listens.
func startPrometheus(t *testing.T, bin, dir string, targets map[string]string) string {
	t.Helper()
	cfg := "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
	for _, job := range slices.Sorted(maps.Keys(targets)) {
		cfg += fmt.Sprintf("  - job_name: %s\n    static_configs:\n      - targets: [%q]\n", job, targets[job])
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0", "--log.level=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log := &daemontest.SyncBuffer{}
	addr := make(chan string, 1)
	drained := make(chan struct{})
	// Prometheus logs the address it bound (exporter-toolkit's "Listening on"). The reader
	// ends when the process exits and closes the pipe.
	listening := regexp.MustCompile(`msg="Listening on" address=(127\.0\.0\.1:\d+)`)
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() {
			<-drained
			cmd.Wait()
			close(exited)
		}()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case <-drained:
		t.Fatalf("prometheus exited before it listened:\n%s", log.String())
	case <-time.After(promTimeout):
		t.Fatalf("prometheus did not listen within %s:\n%s", promTimeout, log.String())
	}
	return ""
}

// promSample is one series of an instant query's answer.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(t *testing.T, base, q string) []promSample {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&out); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	if out.Status != "success" || out.Data.ResultType != "vector" {
		t.Fatalf("query %s: %s %s (%s)", q, out.Status, out.Error, out.Data.ResultType)
	}
	return out.Data.Result
}

// value is the one series' value of an instant query, "" when there is none.
func value(t *testing.T, base, q string) string {
	t.Helper()
	r := promQuery(t, base, q)
	switch len(r) {
	case 0:
		return ""
	case 1:
		s, _ := r[0].Value[1].(string)
		return s
	}
	t.Fatalf("query %s: %d series, want one: %+v", q, len(r), r)
	return ""
}

// promEnv is a real Prometheus scraping real airlockd endpoints, each through a scrapeRelay.
type promEnv struct {
	base    string
	scrapes chan struct{} // a scrape of any target was answered
}

// metricsEndpoint returns the host:port a daemon started with --metrics 127.0.0.1:0 logged.
func metricsEndpoint(t *testing.T, d *daemontest.Daemon) string {
	t.Helper()
	m := regexp.MustCompile(`msg="metrics endpoint listening" addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(d.Stderr())
	if m == nil {
		t.Fatalf("no metrics endpoint in the log:\n%s", d.Stderr())
	}
	return m[1]
}

// startPromEnv starts Prometheus scraping each daemon, by job name.
func startPromEnv(t *testing.T, daemons map[string]*daemontest.Daemon) *promEnv {
	t.Helper()
	bin := prometheusBinary(t)
	p := &promEnv{scrapes: make(chan struct{}, 1)}
	targets := map[string]string{}
	for job, d := range daemons {
		relay := &scrapeRelay{target: metricsEndpoint(t, d), client: &http.Client{Transport: &http.Transport{}}, scrapes: p.scrapes}
		rs := httptest.NewServer(relay)
		t.Cleanup(func() {
			rs.Close()
			relay.client.CloseIdleConnections()
		})
		targets[job] = strings.TrimPrefix(rs.URL, "http://")
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	p.base = startPrometheus(t, bin, t.TempDir(), targets)
	return p
}

// await waits until every query of want answers its value ("" for no series): after each
// scrape that began after it was called, it asks Prometheus again, since a scrape's samples
// are committed before the next scrape of its target begins. It fails at promTimeout.
func (p *promEnv) await(t *testing.T, want map[string]string) {
	t.Helper()
	select {
	case <-p.scrapes: // one that may have begun before the call
	default:
	}
	deadline := time.After(promTimeout)
	var missing []string
	for {
		select {
		case <-p.scrapes:
		case <-deadline:
			t.Fatalf("after %s, Prometheus still answers differently:\n%s", promTimeout, strings.Join(missing, "\n"))
		}
		missing = missing[:0]
		for _, q := range slices.Sorted(maps.Keys(want)) {
			if got := value(t, p.base, q); got != want[q] {
				missing = append(missing, fmt.Sprintf("%s = %q, want %q", q, got, want[q]))
			}
		}
		if len(missing) == 0 {
			return
		}
	}
}

// TestPrometheusScrapesAirlockd: a real Prometheus scrapes a real airlockd's --metrics
// endpoint; the calls at every door of the gate come back through Prometheus's query API with
// their door, operation, capability, action and code — the owner socket's (a tool call
// through the managed airlock-fs, capability invokes and an observe of the go-lamp example
// adapter, refusals), an MCP client's through airlock mcp (an isError result, counted with
// the code the daemon answered), an agent turn's tool calls (one refused by the grant's path
// check), and the room calls this host provides — and the room calls it makes, by the door
// they came through (the owner socket, the web page), next to the state read at scrape time
// (the adapter's state, the room bus connection, the resident sessions).
func TestPrometheusScrapesAirlockd(t *testing.T) {
	prometheusBinary(t)
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	airlock := daemontest.Binary(t, "airlock")
	llm := startModel(t)
	e := startManaged(t, daemontest.Options{Args: []string{"--metrics", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--provider", "local=" + llm.URL()}})
	p := startPromEnv(t, map[string]*daemontest.Daemon{"airlockd": e.d})
	base := p.base

	c := e.c
	roomReady(t, c)
	// A tool call, and one the daemon refuses before the adapter.
	gen := int64(1)
	if r := call(t, c, managedOpen("a", 1, e.root, "fs.read", "fs.write")); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	if r := call(t, c, client.Command{Operation: "invokeTool", SessionID: "a", Generation: &gen, Payload: map[string]any{
		"toolCallId": "w1", "operation": "fs.write", "arguments": map[string]any{"path": "notes.txt", "content": "x", "create": true}}}); !r.OK {
		t.Fatalf("fs.write: %v", r.Err())
	}
	r := call(t, c, client.Command{Operation: "invokeTool", SessionID: "a", Generation: &gen, Payload: map[string]any{
		"toolCallId": "r1", "operation": "fs.read", "arguments": map[string]any{"path": "../outside"}}})
	readCode := code(r)
	if readCode == "" {
		t.Fatal("fs.read of ../outside succeeded")
	}
	// Capability calls of the lamp: two invokes, an observe, a refused argument, an unknown
	// capability.
	mustOK(t, c, "registerAdapter", map[string]any{"name": "lamp", "command": lamp})
	for _, on := range []bool{true, false} {
		mustOK(t, c, "invokeCapability", map[string]any{"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": on}})
	}
	mustOK(t, c, "observeCapability", map[string]any{"capabilityId": "desk_lamp"})
	if r := call(t, c, client.Command{Operation: "invokeCapability", Payload: map[string]any{
		"capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": "yes"}}}); code(r) != "invalid_args" {
		t.Fatalf("bad args: %s", code(r))
	}
	if r := call(t, c, client.Command{Operation: "invokeCapability", Payload: map[string]any{
		"capabilityId": "no_such_thing", "action": "set_power", "args": map[string]any{}}}); code(r) != "unknown_capability" {
		t.Fatalf("unknown capability: %s", code(r))
	}
	// A room call this host provides (to itself: it travels the bus to its own provider).
	var st struct {
		HostID string `json:"hostId"`
	}
	if err := mustOK(t, c, "roomStatus", nil).Decode(&st); err != nil {
		t.Fatal(err)
	}
	mustOK(t, c, "createRoom", map[string]any{"room": "home"})
	mustOK(t, c, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp", "actions": []string{"set_power"}, "observe": true})
	mustOK(t, c, "invokeRoomCapability", map[string]any{"room": "home", "provider": st.HostID, "capabilityId": "desk_lamp",
		"action": "set_power", "args": map[string]any{"on": true}})
	// The same room call from the web page.
	pageInvoke(t, c, map[string]any{"room": "home", "provider": st.HostID, "capability": "desk_lamp",
		"action": "set_power", "args": map[string]any{"on": false}})

	// An MCP client's call through airlock mcp that the grant refuses: an isError result
	// carrying the daemon's code, which is the code it is counted with.
	mcpCode := mcpCallError(t, airlock, e.d.Socket, "a", "fs_read", map[string]any{"path": "../outside"})
	if mcpCode == "" {
		t.Fatal("airlock mcp's fs_read of ../outside succeeded")
	}

	// An agent turn's tool calls: a read that runs, one the grant's path check refuses.
	open := managedOpen("t", 1, e.root, "fs.read")
	open.Payload.(map[string]any)["model"] = map[string]any{"provider": "local", "id": "test-model"}
	if r := call(t, c, open); !r.OK {
		t.Fatalf("open t: %v", r.Err())
	}
	llm.Push(
		modeltest.Reply{ToolCalls: []model.ToolCall{
			{ID: "call_0", Name: "fs_read", Arguments: `{"path":"notes.txt"}`},
			{ID: "call_1", Name: "fs_read", Arguments: `{"path":"../outside"}`}}},
		modeltest.Reply{Text: "done"},
	)
	var turn turnResult
	if err := wake(t, c, "t", 1, "k1", "read", true).Decode(&turn); err != nil || turn.Result.ToolCalls != 2 {
		t.Fatalf("wake: %v %+v", err, turn)
	}

	want := map[string]string{
		`up{job="airlockd"}`: "1",
		`airlock_calls_total{door="socket",operation="fs.write",code="ok"}`:                                                   "1",
		fmt.Sprintf(`airlock_calls_total{door="socket",operation="fs.read",code=%q}`, readCode):                               "1",
		`airlock_calls_total{door="socket",operation="invoke",capability="desk_lamp",action="set_power",code="ok"}`:           "2",
		`airlock_calls_total{door="socket",operation="invoke",capability="desk_lamp",action="set_power",code="invalid_args"}`: "1",
		`airlock_calls_total{door="socket",operation="observe",capability="desk_lamp",code="ok"}`:                             "1",
		`airlock_calls_total{door="socket",operation="invoke",capability="",action="",code="unknown_capability"}`:             "1",
		`airlock_calls_total{door="room",operation="invoke",capability="desk_lamp",action="set_power",code="ok"}`:             "2",
		fmt.Sprintf(`airlock_calls_total{door="mcp",operation="fs.read",code=%q}`, mcpCode):                                   "1",
		`airlock_calls_total{door="turn",operation="fs.read",code="ok"}`:                                                      "1",
		fmt.Sprintf(`airlock_calls_total{door="turn",operation="fs.read",code=%q}`, readCode):                                 "1",
		// Every call has its latency observed, once.
		`sum(airlock_calls_total)`:                 "12",
		`sum(airlock_call_duration_seconds_count)`: "12",
		// The room calls this host made, by the door they came through; the provider (this
		// host) counted them again at its room door.
		`airlock_room_calls_total{door="socket",operation="invoke",code="ok"}`:                                                                  "1",
		`airlock_room_calls_total{door="web",operation="invoke",code="ok"}`:                                                                     "1",
		`sum(airlock_room_calls_total)`:                                                                                                         "2",
		`airlock_room_call_duration_seconds_count{door="web",operation="invoke",outcome="ok"}`:                                                  "1",
		`airlock_call_duration_seconds_bucket{door="socket",operation="invoke",capability="desk_lamp",action="set_power",outcome="ok",le="60"}`: "2",
		// A capability id a client made up is no series.
		`count(airlock_calls_total{capability="no_such_thing"})`: "",
		// State read at scrape time.
		`airlock_adapter_state{adapter="lamp",state="ready"}`:  "1",
		`airlock_adapter_state{adapter="lamp",state="failed"}`: "0",
		`airlock_adapter_restarts_total{adapter="lamp"}`:       "0",
		`airlock_room_bus_connected`:                           "1",
		`airlock_rooms`:                                        "1",
		`airlock_approvals_waiting`:                            "0",
		`airlock_sessions{residency="resident"}`:               "2",
	}
	p.await(t, want)
	// connectionsAccepted counts at least this test's connection; its exact number is not ours.
	if v := value(t, base, `airlock_host_events_total{event="connectionsAccepted"}`); v == "" || v == "0" {
		t.Errorf("connectionsAccepted = %q", v)
	}
	// Nothing that grows without end is a label: no session id, request id, path, room or
	// host id.
	for _, s := range promQuery(t, base, `{__name__=~"airlock_.*"}`) {
		for k, v := range s.Metric {
			if k != "__name__" && (v == "a" || v == "t" || v == "w1" || v == "home" || v == st.HostID || v == mcpClientName ||
				strings.Contains(v, "notes.txt") || strings.Contains(v, "outside")) {
				t.Errorf("series %v carries %s=%q", s.Metric, k, v)
			}
		}
	}
}

// mcpClientName is the name the test's MCP client gives at initialize.
const mcpClientName = "prometheus-test-client"

// mcpCallError runs airlock mcp for session (generation 1) on socket, calls tool with args as
// an MCP client named mcpClientName, and returns the airlock code of its isError result ("" when
// the call succeeded).
func mcpCallError(t *testing.T, airlock, socket, session, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: mcpClientName, Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(airlock, "--socket", socket, "mcp", "--session", session, "--generation", "1")}, nil)
	if err != nil {
		t.Fatalf("airlock mcp: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if !res.IsError {
		return ""
	}
	var me struct {
		Code string `json:"code"`
	}
	raw, _ := json.Marshal(res.Meta["io.airlock/error"])
	if err := json.Unmarshal(raw, &me); err != nil || me.Code == "" {
		t.Fatalf("%s: isError without an airlock code: %+v", tool, res)
	}
	return me.Code
}

// pageInvoke logs in to the daemon's web page (roomUILogin) and invokes a room capability
// from it, as the page's script does.
func pageInvoke(t *testing.T, c *client.Client, body map[string]any) {
	t.Helper()
	var login struct {
		URL string `json:"url"`
	}
	if err := mustOK(t, c, "roomUILogin", map[string]any{}).Decode(&login); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(login.URL)
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + u.Host
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 60 * time.Second, Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(login.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The login's redirect gives the page its CSRF token in the fragment.
	csrf, ok := strings.CutPrefix(resp.Request.URL.Fragment, "csrf=")
	if !ok || csrf == "" {
		t.Fatalf("page login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, origin+"/api/invoke", strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", origin)
	req.Header.Set(web.CSRFHeader, csrf)
	resp, err = hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("page invoke: %d %s", resp.StatusCode, out)
	}
}

// TestPrometheusApprovalsAndBus: host B, on host A's room bus, calls A's lamp, published with
// a per-call approval. Prometheus, scraping both, sees the call wait at A
// (airlock_approvals_waiting 1), then, once A's operator approves it, run at A's room door;
// when A stops, B's bus connection is lost (airlock_room_bus_connected 0 at B).
func TestPrometheusApprovalsAndBus(t *testing.T) {
	prometheusBinary(t)
	lamp := daemontest.Build(t, "./examples/adapters/go-lamp")
	a := daemontest.Start(t, daemontest.Options{Args: []string{"--metrics", "127.0.0.1:0"}})
	ca := a.Dial()
	sa := roomReady(t, ca)
	b := daemontest.Start(t, daemontest.Options{Args: []string{"--metrics", "127.0.0.1:0",
		"--nats-via", a.Socket, "--room-approval-wait", "60s"}})
	cb := b.Dial()
	roomReady(t, cb)
	p := startPromEnv(t, map[string]*daemontest.Daemon{"a": a, "b": b})

	mustOK(t, ca, "registerAdapter", map[string]any{"name": "lamp", "command": lamp})
	mustOK(t, ca, "createRoom", map[string]any{"room": "home"})
	var inv struct {
		Code string `json:"code"`
	}
	if err := mustOK(t, ca, "inviteRoom", map[string]any{"room": "home"}).Decode(&inv); err != nil {
		t.Fatal(err)
	}
	mustOK(t, cb, "joinRoom", map[string]any{"code": inv.Code})
	mustOK(t, ca, "publishCapability", map[string]any{"room": "home", "capabilityId": "desk_lamp",
		"actions": []string{"set_power"}, "approveEach": true})
	if !daemontest.WaitFor(20*time.Second, func() bool {
		var caps struct {
			Capabilities []any `json:"capabilities"`
		}
		mustOK(t, cb, "listRoomCapabilities", map[string]any{"room": "home"}).Decode(&caps)
		return len(caps.Capabilities) == 1
	}) {
		t.Fatal("B never saw A's publication")
	}

	called := make(chan *client.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*promTimeout)
		defer cancel()
		r, err := cb.Call(ctx, client.Command{Operation: "invokeRoomCapability", Payload: map[string]any{"room": "home",
			"provider": sa["hostId"], "capabilityId": "desk_lamp", "action": "set_power", "args": map[string]any{"on": true}}})
		if err != nil {
			r = &client.Response{Error: &protocol.Error{Code: "transport: " + err.Error()}}
		}
		called <- r
	}()
	p.await(t, map[string]string{
		`airlock_approvals_waiting{job="a"}`: "1",
		`airlock_approvals_waiting{job="b"}`: "0",
		// Not yet run: nothing counted at A's room door.
		`airlock_calls_total{job="a",door="room"}`: "",
		`airlock_room_bus_connected{job="b"}`:      "1",
	})
	var ap struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	if err := mustOK(t, ca, "listApprovals", nil).Decode(&ap); err != nil || len(ap.Approvals) != 1 {
		t.Fatalf("approvals: %v %+v", err, ap)
	}
	mustOK(t, ca, "decideApproval", map[string]any{"approvalId": ap.Approvals[0].ID, "approve": true})
	if r := <-called; !r.OK {
		t.Fatalf("B's call: %v", r.Err())
	}
	p.await(t, map[string]string{
		`airlock_approvals_waiting{job="a"}`: "0",
		`airlock_calls_total{job="a",door="room",operation="invoke",capability="desk_lamp",action="set_power",code="ok"}`: "1",
		// B made the call through the bus; it ran at A, where it is counted.
		`airlock_calls_total{job="b",door="room"}`: "",
	})

	a.Stop()
	p.await(t, map[string]string{
		`up{job="a"}`:                         "0",
		`airlock_room_bus_connected{job="b"}`: "0",
	})
	// B stops cleanly with its bus lost: it waits for no server to withdraw its presence,
	// which expires by its TTL. (It waited 15-25 s, each a bus operation's 5 or 10 s.)
	b.Stop()
	if !b.Cmd.ProcessState.Success() || strings.Contains(b.Stderr(), "did not stop cleanly") {
		t.Fatalf("B's stop with its bus lost: %v\n%s", b.Cmd.ProcessState, b.Stderr())
	}
	if d := stopTook(t, b.Stderr()); d >= 4*time.Second {
		t.Fatalf("B took %s to stop with its bus lost:\n%s", d, b.Stderr())
	}
}

// stopTook is how long a daemon took from "airlockd stopping" to "airlockd stopped", by the
// times its log gives them.
func stopTook(t *testing.T, log string) time.Duration {
	t.Helper()
	at := func(msg string) time.Time {
		m := regexp.MustCompile(`time=(\S+) level=\w+ msg="` + msg + `"`).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no %q in the log:\n%s", msg, log)
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	return at("airlockd stopped").Sub(at("airlockd stopping"))
}

// A metrics address that is not loopback is refused unless explicitly allowed, and so is one
// that does not parse; the daemon does not start.
func TestMetricsRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"192.0.2.1:0", "0.0.0.0:0", "nonsense"} {
		dir := daemontest.ShortDir(t)
		_, err := daemon.Start(daemon.Config{SocketPath: filepath.Join(dir, "s.sock"), StateDir: filepath.Join(dir, "state"),
			Metrics: &daemon.MetricsConfig{Addr: addr}})
		if err == nil || !strings.Contains(err.Error(), metrics.CodeInvalidConfig) {
			t.Fatalf("metrics on %s: %v", addr, err)
		}
	}
}
