package daemontest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FloodOptions configure StartFlood.
type FloodOptions struct {
	Socket string
	Conns  int    // connections held at once
	Slow   bool   // send one byte per second instead of nothing
	Prefix string // slow: a complete line every second connection sends before it trickles
	// NoRedial leaves a connection closed once the server closed it; by default the flooder
	// redials it, as a looping harness would.
	NoRedial bool
	// Attach makes every connection attach a session as soon as it is open, connection i the
	// session Attach[i%len(Attach)] of Generation, and then read its events: a harness that
	// subscribes over and over. The server never closes an attached connection by itself, so
	// Stop closes those still open at once instead of waiting for the server.
	Attach     []string
	Generation int64
}

// Flood is a running flooder process (internal/daemontest/flooder): one peer process holding
// many connections to a socket.
type Flood struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	result *FloodResult
}

// FloodResult is what a flood saw once it stopped.
type FloodResult struct {
	Opened         int            `json:"opened"`
	DialFailed     int            `json:"dialFailed"`
	ClosedByServer int            `json:"closedByServer"`
	LeftOpen       int            `json:"leftOpen"` // the server had not closed them by the end of the drain
	Codes          map[string]int `json:"codes"`    // code (or event name) of the last line before the server closed ("" for none)
	MaxOpen        int            `json:"maxOpen"`
}

// StartFlood starts a flood and returns once every connection was dialled once.
func StartFlood(t testing.TB, o FloodOptions) *Flood {
	t.Helper()
	drain := "20s"
	if len(o.Attach) > 0 {
		drain = "0s"
	}
	args := []string{"-socket", o.Socket, "-conns", strconv.Itoa(o.Conns), "-drain", drain}
	if len(o.Attach) > 0 {
		args = append(args, "-mode", "attach", "-sessions", strings.Join(o.Attach, ","), "-generation", strconv.FormatInt(max(o.Generation, 1), 10))
	}
	if o.Slow {
		args = append(args, "-mode", "slow", "-interval", "1s", "-prefix", o.Prefix)
	}
	if o.NoRedial {
		args = append(args, "-redial=false")
	}
	cmd := exec.Command(Build(t, "./internal/daemontest/flooder"), args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &Flood{t: t, cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(func() {
		if f.result == nil {
			f.stdin.Close()
			f.cmd.Process.Kill()
			f.cmd.Wait()
		}
	})
	line, err := f.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("flooder did not start: %q %v", line, err)
	}
	return f
}

// PID is the flooding process's id.
func (f *Flood) PID() int { return f.cmd.Process.Pid }

// Stop ends the flood: the flooder stops redialling and waits (up to 20 s) for the server to
// close every connection it still holds. It returns what the flooder saw.
func (f *Flood) Stop() *FloodResult {
	f.t.Helper()
	if f.result != nil {
		return f.result
	}
	f.stdin.Close()
	line, err := f.out.ReadString('\n')
	f.cmd.Wait()
	var r FloodResult
	if err != nil || json.Unmarshal([]byte(line), &r) != nil {
		f.t.Fatalf("flooder result: %q %v", line, err)
	}
	f.result = &r
	return &r
}

// String summarizes a result for test logs.
func (r *FloodResult) String() string {
	return fmt.Sprintf("opened %d, dial failures %d, closed by the server %d (codes %v), left open %d, at most %d open at once",
		r.Opened, r.DialFailed, r.ClosedByServer, r.Codes, r.LeftOpen, r.MaxOpen)
}

// PeakRSS returns the peak resident set size (VmHWM) of process pid, in bytes.
func PeakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// WaitFor polls cond every 20 ms until it holds or timeout passes, and reports whether it held.
func WaitFor(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
