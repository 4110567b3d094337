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
