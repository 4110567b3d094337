package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/model/modeltest"
)

// These tests are issue 24.3: eight processes of the operator's user, eight connections each,
// each attaching a resident session, held every connection of airlockd busy (an attached
// connection was never evicted), so that every other client got connection_capacity.

// watcher is an `airlock session attach` process: an attachment of its own process, whose
// events the test reads from its stdout.
type watcher struct {
	cmd    *exec.Cmd
	events chan line
	mu     sync.Mutex
	stderr strings.Builder
}

// startWatcher attaches session (generation 1) from a new airlock process and returns once
// the daemon confirmed the attachment.
func startWatcher(t *testing.T, d *daemontest.Daemon, session string) *watcher {
	t.Helper()
	w := &watcher{events: make(chan line, 1024)}
	w.cmd = exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket, "session", "attach", session, "--generation", "1")
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attached := make(chan bool, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			w.mu.Lock()
			w.stderr.WriteString(sc.Text() + "\n")
			w.mu.Unlock()
			if !said && strings.HasPrefix(sc.Text(), "attached ") {
				said = true
				attached <- true
			}
		}
		if !said {
			attached <- false
		}
	})
	wg.Go(func() {
		defer close(w.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev line
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				w.events <- ev
			}
		}
	})
	t.Cleanup(func() {
		w.cmd.Process.Kill()
		wg.Wait()
		w.cmd.Wait()
	})
	if !<-attached {
		t.Fatalf("airlock session attach %s did not attach: %s", session, w.errText())
	}
	return w
}

func (w *watcher) errText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.String()
}

// next returns the watcher's next event, failing the test when none comes in time or the
// process ended.
func (w *watcher) next(t *testing.T) line {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if !ok {
			t.Fatalf("the watcher's connection ended: %s", w.errText())
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher got no event within 30 s")
	}
	return nil
}

// waitEvent returns the watcher's first event named name with requestId rid ("" for any).
func (w *watcher) waitEvent(t *testing.T, name, rid string) line {
	t.Helper()
	for {
		ev := w.next(t)
		if ev["event"] == name && (rid == "" || ev["requestId"] == rid) {
			return ev
		}
	}
}

// dialCall dials, runs one command and closes, as a short-lived client does.
func dialCall(socket string, cmd client.Command) (*client.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r, err := c.Call(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return r, r.Err()
}

// TestBinaryAttachFlood is the flood: eight processes of eight connections, connection
// i of each attaching session s<i>, redialled as soon as the daemon closes it. Through it a
// client of the test process makes 100 status calls, airlock probe exits 0, and an attachment
// made before the flood by another process (airlock session attach) gets every event of three
// turns run meanwhile. Before the attachment bounds all 64 connections stayed attached, and
// every status call and probe got connection_capacity.
func TestBinaryAttachFlood(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL()}})
	cwd := t.TempDir()
	sessions := make([]string, 8)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("s%d", i)
		p := openPayload(cwd)
		if i == 0 {
			p = modelOpen(cwd)
		}
		if _, err := dialCall(d.Socket, client.Command{Operation: "open", SessionID: sessions[i], Generation: gen(1), Payload: p}); err != nil {
			t.Fatalf("open %s: %v", sessions[i], err)
		}
	}
	w := startWatcher(t, d, "s0")

	floods := make([]*daemontest.Flood, 8)
	for i := range floods {
		floods[i] = daemontest.StartFlood(t, daemontest.FloodOptions{Socket: d.Socket, Conns: 8, Attach: sessions, Generation: 1})
	}

	// The normal client: 100 status calls, one after another, each on its own connection.
	var (
		ok       int
		failures = map[string]int{}
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		for range 100 {
			if _, err := dialCall(d.Socket, client.Command{Operation: "status"}); err != nil {
				failures[err.Error()]++
			} else {
				ok++
			}
		}
	})
	// Three turns of s0 while the status calls run: the watcher must see each one's events.
	for k := range 3 {
		llm.Push(modeltest.Reply{Text: fmt.Sprintf("turn %d", k)})
		rid := fmt.Sprintf("wake-%d", k)
		if _, err := dialCall(d.Socket, client.Command{Operation: "wake", SessionID: "s0", Generation: gen(1), RequestID: rid,
			IdempotencyKey: rid, Payload: map[string]any{"prompt": "go", "waitForTerminal": true}}); err != nil {
			t.Errorf("wake %d during the flood: %v", k, err)
			continue
		}
		if ev := w.waitEvent(t, "turnEnd", rid); ev["sessionId"] != "s0" {
			t.Errorf("watcher's turnEnd: %v", ev)
		}
	}
	wg.Wait()
	probes := 0
	for range 3 {
		if out, err := exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket, "probe").CombinedOutput(); err == nil {
			probes++
		} else {
			t.Logf("probe during the flood: %v %s", err, out)
		}
	}
	// The bounds hold while the flood runs.
	var host struct {
		Sessions []struct {
			SessionID           string `json:"sessionId"`
			AttachedConnections int    `json:"attachedConnections"`
		} `json:"sessions"`
		Metrics map[string]float64 `json:"metrics"`
	}
	r, err := dialCall(d.Socket, client.Command{Operation: "status"})
	if err != nil {
		t.Fatalf("status during the flood: %v", err)
	}
	if err := r.Decode(&host); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, s := range host.Sessions {
		total += s.AttachedConnections
		if s.AttachedConnections > 8 {
			t.Errorf("session %s has %d attachments, want at most 8", s.SessionID, s.AttachedConnections)
		}
	}
	if total > 32 {
		t.Errorf("%d attachments in all, want at most 32", total)
	}

	codes := map[string]int{}
	for _, f := range floods {
		for c, n := range f.Stop().Codes {
			codes[c] += n
		}
	}
	t.Logf("during the flood: %d of 100 status calls succeeded, failures %v; %d of 3 probes; %d attachments; metrics %v; flood closes %v",
		ok, failures, probes, total, host.Metrics, codes)
	if ok < 99 {
		t.Errorf("%d of 100 status calls succeeded during the flood, want at least 99", ok)
	}
	if probes != 3 {
		t.Errorf("%d of 3 probes succeeded during the flood", probes)
	}
	if codes["attachmentEvicted"] == 0 || host.Metrics["attachmentsEvicted"] == 0 {
		t.Errorf("no flood attachment was evicted with attachmentEvicted: codes %v, metrics %v", codes, host.Metrics)
	}
	// The watcher is still attached after the flood: it sees s0 close.
	if _, err := dialCall(d.Socket, client.Command{Operation: "close", SessionID: "s0", Generation: gen(1)}); err != nil {
		t.Fatal(err)
	}
	w.waitEvent(t, "sessionClosed", "")
}

// airlockCmd runs the airlock CLI against d and returns its exit code and output.
func airlockCmd(t *testing.T, d *daemontest.Daemon, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t, "airlock"), append([]string{"--socket", d.Socket}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("airlock %v: %v", args, err)
	}
	return 0, string(out)
}

// TestBinaryAttachmentEvictedAcrossProcesses: at the per-session bound, a flooding process's
// new attachment displaces its own older one, which gets attachmentEvicted as its last line
// before the daemon closes it, while another process's single attachment made before keeps
// its events; a third process, when every attachment left is another's single one, is
// refused attachment_capacity.
func TestBinaryAttachmentEvictedAcrossProcesses(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--max-attachments-per-session", "2"}})
	if _, err := dialCall(d.Socket, client.Command{Operation: "open", SessionID: "s1", Generation: gen(1), Payload: openPayload(t.TempDir())}); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(t, d, "s1")
	// Three connections of one process attach s1 one after another: the first two are
	// displaced by the next, and not redialled.
	f := daemontest.StartFlood(t, daemontest.FloodOptions{Socket: d.Socket, Conns: 3, Attach: []string{"s1"}, NoRedial: true})
	var host struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if !daemontest.WaitFor(20*time.Second, func() bool {
		r, err := dialCall(d.Socket, client.Command{Operation: "status"})
		return err == nil && r.Decode(&host) == nil && host.Metrics["attachmentsEvicted"] >= 2
	}) {
		t.Fatalf("the flood's attachments were not evicted: metrics %v", host.Metrics)
	}
	code, out := airlockCmd(t, d, "session", "attach", "s1", "--generation", "1")
	if code == 0 || !strings.Contains(out, "attachment_capacity") {
		t.Errorf("a third process attaching s1 (the watcher's and the flood's single attachments): exit %d %s, want attachment_capacity", code, out)
	}
	r := f.Stop()
	if r.ClosedByServer != 2 || r.Codes["attachmentEvicted"] != 2 {
		t.Errorf("flood: %v, want two connections closed by the daemon after attachmentEvicted", r)
	}
	if _, err := dialCall(d.Socket, client.Command{Operation: "close", SessionID: "s1", Generation: gen(1)}); err != nil {
		t.Fatal(err)
	}
	if ev := w.next(t); ev["event"] != "sessionClosed" {
		t.Errorf("the watcher got %v, want sessionClosed: its attachment was displaced", ev)
	}
}

// TestBinaryControlBand: with every regular connection busy (one attached, one waiting for a
// turn), other processes still get probe, status and close through the control band; any
// other operation there is refused connection_control_only and the connection closed; and
// when the band itself is busy (a drain waiting for the turn), connection_capacity names it.
func TestBinaryControlBand(t *testing.T) {
	llm := startModel(t)
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--provider", "local=" + llm.URL(),
		"--max-connections", "2", "--max-connections-per-peer", "2", "--max-attachments", "1", "--control-connections", "1"}})
	cwd := t.TempDir()
	for _, s := range []string{"s1", "s2", "s3"} {
		if _, err := dialCall(d.Socket, client.Command{Operation: "open", SessionID: s, Generation: gen(1), Payload: modelOpen(cwd)}); err != nil {
			t.Fatal(err)
		}
	}
	attached, waker := d.Dial(), d.Dial()
	if r := call(t, attached, client.Command{Operation: "attach", SessionID: "s1", Generation: gen(1)}); !r.OK {
		t.Fatal(r.Err())
	}
	hold := make(chan struct{})
	llm.Push(modeltest.Reply{Hold: hold, Text: "done"})
	woke := make(chan *client.Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		r, _ := waker.Call(ctx, client.Command{Operation: "wake", SessionID: "s2", Generation: gen(1), IdempotencyKey: "k",
			Payload: map[string]any{"prompt": "go", "waitForTerminal": true}})
		woke <- r
	}()
	<-llm.Arrived(1)
	released := false
	defer func() {
		if !released {
			close(hold)
		}
		<-woke
	}()

	if code, out := airlockCmd(t, d, "probe"); code != 0 {
		t.Errorf("probe with every connection busy: exit %d %s", code, out)
	}
	if code, out := airlockCmd(t, d, "status"); code != 0 {
		t.Errorf("status with every connection busy: exit %d %s", code, out)
	}
	if code, out := airlockCmd(t, d, "session", "close", "s3", "--generation", "1"); code != 0 {
		t.Errorf("close with every connection busy: exit %d %s", code, out)
	}
	// airlock raw prints every line the daemon sends: the refusal, then the connection ends.
	raw := exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket, "raw", "--wait", "10s")
	raw.Stdin = strings.NewReader(`{"protocolVersion":"2.0","requestId":"ls","operation":"listSessions","payload":{}}` + "\n")
	out, _ := raw.Output()
	var refusal client.Response
	if err := json.Unmarshal(out, &refusal); err != nil || refusal.RequestID != "ls" || refusal.Error == nil ||
		refusal.Error.Code != "connection_control_only" || !refusal.Error.Retryable ||
		refusal.Error.Details["controlConnections"] != 1.0 || refusal.Error.Details["maxConnections"] != 2.0 {
		t.Errorf("listSessions on a control connection: %s %v, want connection_control_only", out, err)
	}

	// A drain waits for the held turn, keeping the band's one connection busy.
	drain := exec.Command(daemontest.Binary(t, "airlock"), "--socket", d.Socket, "drain", "--timeout-ms", "60000")
	if err := drain.Start(); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, attached); ev["event"] != "hostDraining" {
		t.Fatalf("attached connection got %v, want hostDraining", ev)
	}
	// probe reports a refusal the daemon sends before any answer (airlock status only sees
	// the connection close).
	code, msg := airlockCmd(t, d, "probe")
	if code != 75 || !strings.Contains(msg, "connection_capacity") || !strings.Contains(msg, "1 control connections") {
		t.Errorf("probe with the band busy: exit %d %s, want connection_capacity naming the control connections", code, msg)
	}
	close(hold)
	released = true
	if err := drain.Wait(); err != nil {
		t.Errorf("drain: %v", err)
	}
	if code, out := airlockCmd(t, d, "status"); code != 0 {
		t.Errorf("status once the drain ended: exit %d %s", code, out)
	}
	var h struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := call(t, attached, client.Command{Operation: "status"}).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Metrics["connectionsAcceptedControl"] < 5 || h.Metrics["controlOnlyRefused"] != 1 {
		t.Errorf("metrics %v, want connectionsAcceptedControl ≥ 5 and controlOnlyRefused 1", h.Metrics)
	}
}
