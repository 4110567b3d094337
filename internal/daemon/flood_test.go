package daemon_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// These tests flood the owner socket from one process (issue 16): 2,000 idle connections, or
// 64 that send one byte per second, while a client of another process runs 100 handshakes and
// an attached connection waits for its events. The deadlines are short so that the tests are
// quick; every count is asserted after the deadlines passed, never a latency.

// floodRSSBound is a generous bound on the daemon's peak RSS through a flood. Without -race
// the daemon peaks at about 60 MiB through the idle flood, which churns about 100,000
// connections; the race detector's shadow memory and goroutine bookkeeping make that about
// 330 MiB.
const floodRSSBound = 512 << 20

const handshakeLine = `{"protocolVersion":"1.0","requestId":"h","operation":"handshake","payload":{}}`

func TestBinaryFloodIdleConnections(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--first-line-timeout", "1s", "--line-timeout", "1s"}})
	floodOwnerSocket(t, d, daemontest.FloodOptions{Socket: d.Socket, Conns: 2000})
}

func TestBinaryFloodSlowConnections(t *testing.T) {
	// Enough room for every slow connection of the one peer, so that the line deadlines, not
	// evictions, are what closes them: every second connection trickles its first line, the
	// others complete a handshake and then trickle the next line.
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--first-line-timeout", "1s", "--line-timeout", "1s",
		"--max-connections", "128", "--max-connections-per-peer", "100"}})
	r := floodOwnerSocket(t, d, daemontest.FloodOptions{Socket: d.Socket, Conns: 64, Slow: true, Prefix: handshakeLine})
	if r.Codes["line_timeout"] == 0 {
		t.Errorf("no slow connection was closed with line_timeout: %v", r)
	}
}

// floodOwnerSocket runs the flood o against d and checks what must hold through it.
func floodOwnerSocket(t *testing.T, d *daemontest.Daemon, o daemontest.FloodOptions) *daemontest.FloodResult {
	cwd := t.TempDir()
	owner, attached := d.Dial(), d.Dial()
	for _, s := range []string{"s1", "s2"} {
		if r := call(t, owner, client.Command{Operation: "open", SessionID: s, Generation: gen(1), Payload: openPayload(cwd)}); !r.OK {
			t.Fatal(r.Err())
		}
		if r := call(t, attached, client.Command{Operation: "attach", SessionID: s, Generation: gen(1)}); !r.OK {
			t.Fatal(r.Err())
		}
	}

	flood := daemontest.StartFlood(t, o)
	// Ten workers of ten calls each: under a flood every connect waits behind the flood's in
	// the kernel's accept queue, so one after another they would take minutes with -race.
	var (
		mu       sync.Mutex
		ok       int
		failures = map[string]int{}
		worst    time.Duration
		wg       sync.WaitGroup
	)
	for w := range 10 {
		wg.Go(func() {
			for i := range 10 {
				op := "handshake"
				if (w+i)%2 == 1 {
					op = "status"
				}
				start := time.Now()
				err := oneCall(d.Socket, op)
				mu.Lock()
				if err != nil {
					failures[err.Error()]++
				} else {
					ok++
				}
				worst = max(worst, time.Since(start))
				mu.Unlock()
				// Spread over a few deadlines, so that the calls meet evictions, timeouts and
				// redials.
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	// Three airlock probes, side by side: each is a process of its own (its own peer), and one
	// after another under the flood they took a second each.
	probes := 0
	airlock := daemontest.Binary(t, "airlock")
	var pwg sync.WaitGroup
	for range 3 {
		pwg.Go(func() {
			out, err := exec.Command(airlock, "--socket", d.Socket, "probe").CombinedOutput()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				probes++
			} else {
				t.Logf("probe during the flood: %v %s", err, out)
			}
		})
	}
	pwg.Wait()
	// An event during the flood reaches the attached connection.
	call(t, owner, client.Command{Operation: "close", SessionID: "s1", Generation: gen(1)})
	ev1 := nextEvent(t, attached)
	r := flood.Stop()
	call(t, owner, client.Command{Operation: "close", SessionID: "s2", Generation: gen(1)})
	ev2 := nextEvent(t, attached)
	rss := daemontest.PeakRSS(t, d.Cmd.Process.Pid)

	t.Logf("during the flood: %d of 100 handshakes and status calls succeeded (slowest %v), failures %v; %d of 3 probes", ok, worst, failures, probes)
	t.Logf("flood: %v; daemon peak RSS %d MiB", r, rss>>20)
	if ok < 99 {
		t.Errorf("%d of 100 calls succeeded during the flood, want at least 99", ok)
	}
	if probes != 3 {
		t.Errorf("%d of 3 probes succeeded during the flood", probes)
	}
	if ev1["event"] != "sessionClosed" || ev1["sessionId"] != "s1" || ev2["event"] != "sessionClosed" || ev2["sessionId"] != "s2" {
		t.Errorf("attached connection got %v then %v, want sessionClosed of s1 then s2", ev1, ev2)
	}
	if r.LeftOpen != 0 || r.ClosedByServer != r.Opened {
		t.Errorf("the daemon left flood connections open past their deadline: %v", r)
	}
	for c := range r.Codes {
		if !slices.Contains([]string{"line_timeout", "connection_evicted", "connection_capacity"}, c) {
			t.Errorf("flood connections closed with code %q: %v", c, r)
		}
	}
	if rss > floodRSSBound {
		t.Errorf("daemon peak RSS %d MiB, want at most %d MiB", rss>>20, floodRSSBound>>20)
	}
	return r
}

// oneCall dials the daemon, runs one command and closes, as a short-lived client does.
func oneCall(socket, op string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := c.Call(ctx, client.Command{Operation: op})
	if err != nil {
		return err
	}
	return r.Err()
}

func TestBinaryLineDeadlines(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--first-line-timeout", "1s", "--line-timeout", "1s"}})
	cases := []struct {
		name      string
		first     string // a complete line sent first, if any
		partial   string
		firstLine bool
	}{
		{"silent connection", "", "", true},
		{"partial first line", "", `{"protocolVersion":"1.0",`, true},
		{"stalled line after a command", handshakeLine, `{"protocolVersion":"1.0",`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRawT(t, d.Socket)
			if tc.first != "" {
				rc.send(tc.first)
				if resp := rc.next(); errCodeOf(resp) != "" {
					t.Fatalf("first command: %v", resp)
				}
			}
			if tc.partial != "" {
				if _, err := rc.nc.Write([]byte(tc.partial)); err != nil {
					t.Fatal(err)
				}
			}
			resp := rc.next()
			e, _ := resp["error"].(map[string]any)
			det, _ := e["details"].(map[string]any)
			if errCodeOf(resp) != "line_timeout" || e["retryable"] != true || resp["protocolVersion"] != "1.0" ||
				det["timeoutMs"] != 1000.0 || det["firstLine"] != tc.firstLine {
				t.Fatalf("got %v, want line_timeout with timeoutMs 1000 and firstLine %v", resp, tc.firstLine)
			}
			rc.expectEOF()
		})
	}
	var h struct {
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := call(t, d.Dial(), client.Command{Operation: "status"}).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Metrics["connectionsTimedOut"] != 3 {
		t.Errorf("status metrics %v, want connectionsTimedOut 3", h.Metrics)
	}
}

// TestOwnerSocketSurvivesDescriptorExhaustion: when the daemon runs out of descriptors (a
// flood of connections to any of its listeners: the web page's TCP port is open to every
// local user), accept fails with EMFILE. The accept loop used to end at the first failure,
// so that once the flood was over the daemon ran on with its owner socket dead: connections
// queued and were never answered. It must retry and serve again once descriptors are back.
func TestOwnerSocketSurvivesDescriptorExhaustion(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{Args: []string{"--rooms=false"}})
	pid := d.Cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	// A few descriptors above what the daemon holds now; the idle connections below take
	// them, and the next accept fails.
	var old unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, nil, &old); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: uint64(len(fds) + 4), Max: old.Max}, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	var conns []net.Conn
	for range 16 {
		c, err := net.Dial("unix", d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	d.WaitStderr("an accept failing for want of descriptors", regexp.MustCompile(`accept failed.*too many open files`))
	for _, c := range conns {
		c.Close()
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &old, nil); err != nil {
		t.Fatalf("prlimit: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.Socket)
	if err != nil {
		t.Fatalf("the owner socket after the shortage: %v", err)
	}
	defer c.Close()
	if r, err := c.Call(ctx, client.Command{Operation: "status"}); err != nil || !r.OK {
		t.Fatalf("status after the shortage: %v %+v", err, r)
	}
}
