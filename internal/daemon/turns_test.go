package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/model/modeltest"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter/toolclient"
)

// startModel starts a scripted model server for one test.
func startModel(t *testing.T) *modeltest.Server {
	t.Helper()
	s := modeltest.New()
	t.Cleanup(s.Close)
	return s
}

// modelOpen is an open payload of a session that runs turns on provider "local".
func modelOpen(cwd string) map[string]any {
	p := openPayload(cwd)
	p["model"] = map[string]any{"provider": "local", "id": "test-model"}
	return p
}

func withTools(p map[string]any, desc map[string]any) map[string]any {
	p["resources"].(map[string]any)["tools"] = map[string]any{"mode": "host-adapter", "descriptor": desc}
	return p
}

func wake(t *testing.T, c *client.Client, session string, g int64, key, prompt string, wait bool) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.Call(ctx, client.Command{Operation: "wake", SessionID: session, Generation: gen(g), IdempotencyKey: key,
		Payload: map[string]any{"prompt": prompt, "waitForTerminal": wait}})
	if err != nil {
		t.Fatalf("wake: %v", err)
	}
	return r
}

type turnResult struct {
	Result struct {
		Text       string `json:"text"`
		StopReason string `json:"stopReason"`
		ModelCalls int    `json:"modelCalls"`
		ToolCalls  int    `json:"toolCalls"`
	} `json:"result"`
	Session struct {
		State string `json:"state"`
	} `json:"session"`
}

type ticketData struct {
	Ticket struct {
		TicketID string          `json:"ticketId"`
		State    string          `json:"state"`
		Result   json.RawMessage `json:"result"`
		Error    *protocol.Error `json:"error"`
	} `json:"ticket"`
}

func ticketOf(t *testing.T, r *client.Response) ticketData {
	t.Helper()
	var td ticketData
	if err := r.Decode(&td); err != nil {
		t.Fatalf("ticket: %v", err)
	}
	return td
}

// eventNames collects the names of the events c receives until stop is among them.
func eventNames(t *testing.T, c *client.Client, stop string) []string {
	t.Helper()
	var names []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case raw := <-c.Events():
			var ev struct {
				Event string `json:"event"`
			}
			json.Unmarshal(raw, &ev)
			names = append(names, ev.Event)
			if ev.Event == stop {
				return names
			}
		case <-timeout:
			t.Fatalf("no %s event; got %v", stop, names)
		}
	}
}

// TestBinaryWakeRunsToolsThroughTheAdapter drives one turn through a real airlockd: the model
// asks for fs.read, the daemon calls the session's adapter with a key derived from the model's
// tool-call id, and the model sees the output.
func TestBinaryWakeRunsToolsThroughTheAdapter(t *testing.T) {
	adapter := startScriptedAdapter(t)
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	c := d.Dial()
	host := hostID(t, c)
	cwd := t.TempDir()
	os.WriteFile(filepath.Join(cwd, "a.txt"), []byte("hello"), 0o600)
	handle := newHandle(t)
	if r := call(t, c, client.Command{Operation: "open", SessionID: "agent", Generation: gen(1),
		Payload: withTools(modelOpen(cwd), descriptor(adapter.socket, host, "agent", 1, handle, "fs.stat", "fs.read"))}); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}
	watcher := d.Dial()
	if r := call(t, watcher, client.Command{Operation: "attach", SessionID: "agent", Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}

	llm.Push(
		modeltest.Reply{Text: "Let me look.", Chunk: 4, ToolCalls: []model.ToolCall{{ID: "call_0", Name: "fs_read", Arguments: `{"path":"a.txt"}`}}},
		modeltest.Reply{Text: "The file says hello.", Chunk: 5},
	)
	r := wake(t, c, "agent", 1, "k1", "What does a.txt say?", true)
	var res turnResult
	if err := r.Decode(&res); err != nil {
		t.Fatalf("wake: %v", err)
	}
	if res.Result.Text != "The file says hello." || res.Result.ModelCalls != 2 || res.Result.ToolCalls != 1 || res.Session.State != "idle" {
		t.Fatalf("result %+v", res)
	}

	reqs := llm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("model saw %d requests", len(reqs))
	}
	var offered []string
	for _, tool := range reqs[0].Request.Tools {
		offered = append(offered, tool.Name)
	}
	if !slices.Equal(offered, []string{"fs_stat", "fs_read"}) {
		t.Fatalf("tools offered: %v", offered)
	}
	last := reqs[1].Request.Messages[len(reqs[1].Request.Messages)-1]
	if last.Role != model.RoleTool || last.ToolCallID != "call_0" || !strings.Contains(last.Content, "hello") {
		t.Fatalf("tool output shown to the model: %+v", last)
	}
	var invokes []map[string]any
	adapter.mu.Lock()
	for _, f := range adapter.frames {
		if f["kind"] == "invoke" {
			invokes = append(invokes, f)
		}
	}
	adapter.mu.Unlock()
	wantKey := toolclient.IdempotencyKey("fs.read", protocol.TicketID("agent", "k1")+"\x001\x00call_0")
	if len(invokes) != 1 || invokes[0]["operation"] != "fs.read" || invokes[0]["idempotencyKey"] != wantKey {
		t.Fatalf("adapter invokes: %v", invokes)
	}

	names := eventNames(t, watcher, "sessionIdle")
	want := []string{"promptAccepted", "turnStart", "messageStart", "messageEnd", "toolStart", "toolEnd", "messageStart", "messageEnd", "turnEnd", "sessionIdle"}
	var compact []string
	for _, n := range names {
		if n != "messageUpdate" {
			compact = append(compact, n)
		}
	}
	if !slices.Equal(compact, want) || !slices.Contains(names, "messageUpdate") {
		t.Fatalf("events %v", names)
	}

	// The same key and prompt gets the recorded outcome without a model call; the same key
	// with another prompt conflicts.
	var again turnResult
	if err := wake(t, c, "agent", 1, "k1", "What does a.txt say?", true).Decode(&again); err != nil || again.Result.Text != res.Result.Text {
		t.Fatalf("duplicate: %v %+v", err, again)
	}
	if got := code(wake(t, c, "agent", 1, "k1", "Something else", true)); got != "idempotency_conflict" {
		t.Fatalf("reused key: %s", got)
	}
	if llm.Count() != 2 {
		t.Fatalf("duplicates reached the model: %d calls", llm.Count())
	}

	// waitForTerminal false answers with a ticket at once; ticket reports the outcome.
	llm.Push(modeltest.Reply{Text: "later"})
	tk := ticketOf(t, wake(t, c, "agent", 1, "k2", "and later?", false))
	if tk.Ticket.TicketID != protocol.TicketID("agent", "k2") {
		t.Fatalf("ticket id %s", tk.Ticket.TicketID)
	}
	waitTicket(t, c, tk.Ticket.TicketID, "succeeded")

	// The handle reached no state file and no daemon log line.
	if strings.Contains(d.Stderr(), handle) {
		t.Fatal("capability handle in the daemon log")
	}
	assertNotInFiles(t, d.StateDir, handle)
	// The scan covered the journal, which recorded the model's call at the turn door.
	recorded := false
	for _, r := range journalRecords(t, d.StateDir) {
		recorded = recorded || r.Kind == audit.KindStarted && r.Door == audit.DoorTurn && r.Target.Op == "fs.read" &&
			r.Target.Path == "a.txt" && r.Actor.Session == "agent" && r.Actor.Generation == 1 &&
			r.IdempotencyKeySHA256 == audit.Digest([]byte(wantKey))
	}
	if !recorded {
		t.Fatalf("the journal has no turn-door record of the model's fs.read: %+v", journalRecords(t, d.StateDir))
	}
}

// waitTicket polls ticket until it reports state.
func waitTicket(t *testing.T, c *client.Client, id, state string) ticketData {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := call(t, c, client.Command{Operation: "ticket", Payload: map[string]any{"ticketId": id}})
		if code(r) == "host_not_ready" { // still recovering
			time.Sleep(10 * time.Millisecond)
			continue
		}
		td := ticketOf(t, r)
		if td.Ticket.State == state {
			return td
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticket %s stayed %s, want %s", id, td.Ticket.State, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// assertNotInFiles fails when secret appears in any file under dir. A daemon's state
// directory must hold its audit journal, which the scan then covers.
func assertNotInFiles(t *testing.T, dir, secret string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, "sessions")); err == nil {
		if _, err := os.Stat(audit.DirIn(dir)); err != nil {
			t.Errorf("no audit journal in the state directory %s to scan: %v", dir, err)
		}
	}
	filepath.WalkDir(dir, func(path string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), secret) {
			t.Errorf("secret found in %s", path)
		}
		return nil
	})
}

// TestBinaryTurnRefusals provokes the admission and control codes of agent turns.
func TestBinaryTurnRefusals(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{
		"--provider", "local=" + llm.URL(), "--max-session-queue-depth", "1", "--provider", "keyed=" + llm.URL(),
		"--provider-key-env", "keyed=AIRLOCK_TEST_ABSENT_KEY"}})
	c := d.Dial()
	cwd := t.TempDir()

	// Without a model a session runs no turns; a memory session issues no tickets.
	call(t, c, client.Command{Operation: "open", SessionID: "plain", Generation: gen(1), Payload: openPayload(cwd)})
	if got := code(wake(t, c, "plain", 1, "k", "hi", true)); got != "session_precondition_failed" {
		t.Fatalf("no model: %s", got)
	}
	mem := modelOpen(cwd)
	mem["session"] = map[string]any{"mode": "memory"}
	call(t, c, client.Command{Operation: "open", SessionID: "mem", Generation: gen(1), Payload: mem})
	if got := code(wake(t, c, "mem", 1, "k", "hi", false)); got != "durable_admission_unavailable" {
		t.Fatalf("memory ticket: %s", got)
	}
	// A provider whose key variable is empty refuses opens; an unknown one too.
	keyed := modelOpen(cwd)
	keyed["model"] = map[string]any{"provider": "keyed", "id": "m"}
	if got := code(call(t, c, client.Command{Operation: "open", SessionID: "keyed", Generation: gen(1), Payload: keyed})); got != "credentials_required" {
		t.Fatalf("missing key: %s", got)
	}
	keyed["model"] = map[string]any{"provider": "nowhere", "id": "m"}
	if got := code(call(t, c, client.Command{Operation: "open", SessionID: "keyed", Generation: gen(1), Payload: keyed})); got != "open_failed" {
		t.Fatalf("unknown provider: %s", got)
	}

	call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(1), Payload: modelOpen(cwd)})
	if got := code(call(t, c, client.Command{Operation: "steer", SessionID: "s", Generation: gen(1), IdempotencyKey: "st",
		Payload: map[string]any{"message": "faster"}})); got != "session_not_running" {
		t.Fatalf("steer while idle: %s", got)
	}
	var ab protocol.AbortResult
	if err := call(t, c, client.Command{Operation: "abort", SessionID: "s", Generation: gen(1)}).Decode(&ab); err != nil || ab.Aborted {
		t.Fatalf("abort while idle: %v %+v", err, ab)
	}

	hold := make(chan struct{})
	llm.Push(modeltest.Reply{Hold: hold})
	first := make(chan *client.Response, 1)
	go func() {
		r, _ := c.Call(context.Background(), client.Command{Operation: "wake", SessionID: "s", Generation: gen(1), IdempotencyKey: "w1",
			Payload: map[string]any{"prompt": "one"}})
		first <- r
	}()
	<-llm.Arrived(1)
	// One running, one queued (depth 1), the third refused.
	tk := ticketOf(t, wake(t, c, "s", 1, "w2", "two", false))
	if tk.Ticket.State != "queued" {
		t.Fatalf("second wake: %+v", tk)
	}
	if got := code(wake(t, c, "s", 1, "w3", "three", false)); got != "session_queue_full" {
		t.Fatalf("third wake: %s", got)
	}
	if got := code(wake(t, c, "s", 1, "w1", "one", false)); got != "" {
		t.Fatalf("live duplicate: %s", got)
	}
	// A higher generation cannot replace a busy one.
	if got := code(call(t, c, client.Command{Operation: "open", SessionID: "s", Generation: gen(2), Payload: modelOpen(cwd)})); got != "session_busy" {
		t.Fatalf("replace while running: %s", got)
	}
	steer := func(key, msg string) string {
		return code(call(t, c, client.Command{Operation: "steer", SessionID: "s", Generation: gen(1), IdempotencyKey: key,
			Payload: map[string]any{"message": msg}}))
	}
	if got := steer("st1", "look at b too"); got != "" {
		t.Fatalf("steer: %s", got)
	}
	if got := steer("st1", "look at b too"); got != "" {
		t.Fatalf("steer retry: %s", got)
	}
	if got := steer("st1", "something else"); got != "idempotency_conflict" {
		t.Fatalf("steer reuse: %s", got)
	}
	if err := call(t, c, client.Command{Operation: "abort", SessionID: "s", Generation: gen(1)}).Decode(&ab); err != nil || !ab.Aborted {
		t.Fatalf("abort: %v %+v", err, ab)
	}
	if got := code(<-first); got != "aborted" {
		t.Fatalf("aborted wake: %s", got)
	}
	close(hold)

	// The queued wake runs next; a model failure fails it and the generation.
	llm.Push(modeltest.Reply{Status: 500})
	td := waitTicket(t, c, tk.Ticket.TicketID, "failed")
	if td.Ticket.Error == nil || td.Ticket.Error.Code != "model_unavailable" {
		t.Fatalf("failed ticket: %+v", td.Ticket)
	}
	if got := code(wake(t, c, "s", 1, "w4", "four", true)); got != "session_failed" {
		t.Fatalf("after a failed turn: %s", got)
	}
	// An aborted wake is terminal: its key answers the recorded failure.
	if got := code(wake(t, c, "s", 1, "w1", "one", true)); got != "aborted" {
		t.Fatalf("aborted duplicate: %s", got)
	}
	if got := code(call(t, c, client.Command{Operation: "ticket", Payload: map[string]any{"ticketId": protocol.TicketID("s", "nope")}})); got != "ticket_not_found" {
		t.Fatalf("unknown ticket: %s", got)
	}
	if got := code(call(t, c, client.Command{Operation: "reconcile", Payload: map[string]any{"ticketId": tk.Ticket.TicketID, "outcome": "succeeded"}})); got != "ticket_not_indeterminate" {
		t.Fatalf("reconcile a failed ticket: %s", got)
	}
}
