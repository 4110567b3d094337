package mcp_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// stdioProc is airlock mcp run as a client runs it on stdio, spoken to line by line.
type stdioProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	stderr *daemontest.SyncBuffer
	exited chan struct{}

	mu    sync.Mutex
	lines []string // every line written to stdout, in order
}

// startStdio starts airlock mcp with args (after the global --socket) on pipes.
func startStdio(t *testing.T, e *env, args ...string) *stdioProc {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t, "airlock"), append([]string{"--socket", e.d.Socket, "mcp"}, args...)...)
	p := &stdioProc{cmd: cmd, stderr: &daemontest.SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		br := bufio.NewReader(out)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				p.mu.Lock()
				p.lines = append(p.lines, strings.TrimSpace(line))
				p.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { <-read; cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.in.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("airlock mcp stdout:\n%s\nstderr:\n%s", strings.Join(p.output(), "\n"), p.stderr.String())
		}
	})
	return p
}

func (p *stdioProc) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.in, line+"\n"); err != nil {
		t.Fatalf("write %s: %v", line, err)
	}
}

func (p *stdioProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// rpcMessage is a JSON-RPC message as a test reads it.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// responseTo returns the response to request id (its JSON), waiting for it.
func (p *stdioProc) responseTo(t *testing.T, id string) rpcMessage {
	t.Helper()
	var m rpcMessage
	waitFor(t, "the response to "+id, func() bool {
		var ok bool
		m, ok = findResponse(p.output(), id)
		return ok
	})
	return m
}

// findResponse finds the response to request id (its JSON) among lines.
func findResponse(lines []string, id string) (rpcMessage, bool) {
	for _, l := range lines {
		var m rpcMessage
		if json.Unmarshal([]byte(l), &m) == nil && m.Method == "" && string(m.ID) == id {
			return m, true
		}
	}
	return rpcMessage{}, false
}

// noResponseOrCodeZero fails when lines answer one of ids, or carry an error of code 0.
func noResponseOrCodeZero(t *testing.T, lines []string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if m, ok := findResponse(lines, id); ok {
			b, _ := json.Marshal(m)
			t.Errorf("the cancelled request %s was answered: %s", id, b)
		}
	}
	for _, l := range lines {
		var m rpcMessage
		if json.Unmarshal([]byte(l), &m) == nil && m.Error != nil && m.Error.Code == 0 {
			t.Errorf("an error of code 0: %s", l)
		}
	}
}

// startCancelEnv opens session agent over a scripted adapter granting fs.search, which holds
// every call until the test ends, under a policy that asks the operator about the lamp's
// set_power, so that both kinds of call stay in flight until cancelled; the lamp is
// registered.
func startCancelEnv(t *testing.T) (*env, *scripted) {
	t.Helper()
	e := startEnv(t)
	a := startScripted(t)
	sess := policyFile(t, `{"name":"asks","default":"allow","rules":[{"capability":"desk_lamp","actions":["set_power"],"decision":"ask"}]}`)
	p := map[string]any{
		"cwd": e.root, "session": map[string]any{"mode": "memory"}, "policy": map[string]any{"file": sess},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": scriptedDescriptor(a.socket, e.host, "agent", "fs.search")}},
	}
	if r := call(t, e.c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1), Payload: p}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	e.registerLamp(t)
	return e, a
}

// pendingApprovals returns the ids of the approval queue's requests.
func pendingApprovals(t *testing.T, e *env) []string {
	t.Helper()
	var l struct {
		Approvals []struct {
			ID string `json:"id"`
		} `json:"approvals"`
	}
	if err := call(t, e.c, client.Command{Operation: "listApprovals", Payload: map[string]any{}}).Decode(&l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range l.Approvals {
		ids = append(ids, a.ID)
	}
	return ids
}

// denyAll denies every request of the approval queue, so that an action a client gave up on
// ends.
func denyAll(t *testing.T, e *env) {
	t.Helper()
	for _, id := range pendingApprovals(t, e) {
		call(t, e.c, client.Command{Operation: "decideApproval", Payload: map[string]any{"approvalId": id, "approve": false}})
	}
}

// TestCancelledCallIsNotAnswered: on stdio, under 2025-11-25 and under 2026-07-28, a call
// cancelled by notifications/cancelled while it runs gets no response, as MCP says and
// docs/mcp.md promises: an fs_search through the go-sdk's handler (its adapter request
// aborted) and a capability action waiting for the operator. A request after them is
// answered, and stdin closed right after a cancel (of a second search) ends the process at
// once: the cancelled call is settled, not waited for until the drain deadline. Before, each cancelled call
// was answered {"code":0,"message":"context canceled"}, an error with no JSON-RPC code.
func TestCancelledCallIsNotAnswered(t *testing.T) {
	e, a := startCancelEnv(t)
	for _, rev := range []string{revSessions, revStateless} {
		t.Run(rev, func(t *testing.T) {
			meta := `"_meta":{"progressToken":"tok"}`
			if rev == revStateless {
				meta = strings.Replace(metaEnvelope, `"_meta":{`, `"_meta":{"progressToken":"tok",`, 1)
			}
			p := startStdio(t, e, "--session", "agent", "--generation", "1", "--caps", "desk_lamp")
			if rev == revSessions {
				p.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+rev+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
				if m := p.responseTo(t, "0"); m.Error != nil {
					t.Fatalf("initialize: %s", m.Error.Message)
				}
				p.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			}
			invokes, aborts := len(a.framesOf("invoke")), len(a.framesOf("abort"))
			search := func(id string) {
				t.Helper()
				p.send(t, `{"jsonrpc":"2.0","id":"`+id+`","method":"tools/call","params":{"name":"fs_search","arguments":{"path":".","query":"ZZZQQQ"},`+meta+`}}`)
				invokes++
				waitFor(t, "the search at the adapter", func() bool { return len(a.framesOf("invoke")) == invokes })
			}
			cancel := func(id string) {
				t.Helper()
				p.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`+id+`"}}`)
			}
			search("s1")
			cancel("s1")
			aborts++
			waitFor(t, "the abort at the adapter", func() bool { return len(a.framesOf("abort")) == aborts })

			p.send(t, `{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"desk_lamp_set_power","arguments":{"on":true},`+meta+`}}`)
			waitFor(t, "the action in the approval queue", func() bool { return len(pendingApprovals(t, e)) == 1 })
			cancel("a1")
			// The request after the cancel is answered once the cancel has been read: only
			// then is the action decided, or its answer could cross the cancel (as MCP allows).
			ping := `{"jsonrpc":"2.0","id":"p1","method":"ping"}`
			if rev == revStateless {
				ping = `{"jsonrpc":"2.0","id":"p1","method":"tools/list","params":{` + metaEnvelope + `}}`
			}
			p.send(t, ping)
			if m := p.responseTo(t, `"p1"`); m.Error != nil || len(m.Result) == 0 {
				t.Fatalf("the request after the cancelled ones: %+v", m)
			}
			denyAll(t, e) // the action runs on without its client until decided

			search("s2")
			cancel("s2")
			closed := time.Now()
			p.in.Close()
			select {
			case <-p.exited:
			case <-time.After(20 * time.Second):
				t.Fatal("airlock mcp did not exit after stdin closed")
			}
			if took := time.Since(closed); took > 15*time.Second {
				t.Errorf("airlock mcp took %v to exit after stdin closed", took)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit %d", code)
			}
			waitFor(t, "the abort at the adapter", func() bool { return len(a.framesOf("abort")) == aborts+1 })
			noResponseOrCodeZero(t, p.output(), `"s1"`, `"a1"`, `"s2"`)
		})
	}
}

// TestHTTPCancelledCallIsNotAnswered: over Streamable HTTP in a session of 2025-11-25 (airlock
// mcp --http), a call cancelled by notifications/cancelled (posted in the session) while it
// runs gets no response: its POST's event stream ends without one, for an fs_search (whose
// adapter request is aborted) and for a capability action waiting for the operator. Before,
// the stream carried {"code":0,"message":"context canceled"}.
func TestHTTPCancelledCallIsNotAnswered(t *testing.T) {
	e, a := startCancelEnv(t)
	p := startStdio(t, e, "--session", "agent", "--generation", "1", "--caps", "desk_lamp", "--http", "127.0.0.1:0")
	served := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/mcp)\n(?:.*\n)*?airlock mcp: bearer token \(shown once\): (\S+)\n`)
	m := served.FindStringSubmatch(p.stderr.Wait(t, "the URL and the token", served))
	url, token := m[1], m[2]
	defer http.DefaultClient.CloseIdleConnections()

	status, h, init := rawPost(t, url, token, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+revSessions+`","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`, nil)
	sid := h.Get("Mcp-Session-Id")
	if status != http.StatusOK || sid == "" || init["result"] == nil {
		t.Fatalf("initialize: status %d, session %q: %v", status, sid, init)
	}
	session := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": revSessions}
	if status, _, _ := rawPost(t, url, token, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session); status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: status %d", status)
	}

	// stream posts a call and returns the data lines of its event stream once it ends.
	stream := func(body string) <-chan []string {
		out := make(chan []string, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			for k, v := range session {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- []string{"error: " + err.Error()}
				return
			}
			defer resp.Body.Close()
			var data []string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
					data = append(data, d)
				}
			}
			out <- data
		}()
		return out
	}
	cancel := func(id string) {
		t.Helper()
		if status, _, _ := rawPost(t, url, token, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"`+id+`"}}`, session); status != http.StatusAccepted {
			t.Fatalf("notifications/cancelled: status %d", status)
		}
	}
	ended := func(what string, c <-chan []string) []string {
		t.Helper()
		select {
		case data := <-c:
			return data
		case <-time.After(20 * time.Second):
			t.Fatalf("the stream of the cancelled %s did not end", what)
		}
		return nil
	}

	search := stream(`{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"fs_search","arguments":{"path":".","query":"ZZZQQQ"},"_meta":{"progressToken":"tok"}}}`)
	waitFor(t, "the search at the adapter", func() bool { return len(a.framesOf("invoke")) == 1 })
	cancel("s1")
	noResponseOrCodeZero(t, ended("search", search), `"s1"`)
	waitFor(t, "the abort at the adapter", func() bool { return len(a.framesOf("abort")) == 1 })

	action := stream(`{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"desk_lamp_set_power","arguments":{"on":true}}}`)
	waitFor(t, "the action in the approval queue", func() bool { return len(pendingApprovals(t, e)) == 1 })
	cancel("a1")
	noResponseOrCodeZero(t, ended("action", action), `"a1"`)
	denyAll(t, e)

	// The session serves on, and answers what is not cancelled.
	if status, _, msg := rawPost(t, url, token, `{"jsonrpc":"2.0","id":"p1","method":"ping"}`, session); status != http.StatusOK || msg["result"] == nil {
		t.Fatalf("ping after the cancelled calls: status %d: %v", status, msg)
	}
}
