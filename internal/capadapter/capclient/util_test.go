package capclient

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// testOpts are client options for tests: the default call timeout, a start that tolerates a
// loaded machine running the race detector.
var testStartTimeout = 20 * time.Second

func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// procState returns the state letter of pid from /proc, and its parent, or "" when pid does
// not exist.
func procState(pid int) (state string, ppid int) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0], ppid
}

// children returns the pids whose parent is this process, zombies included.
func children(t testing.TB) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid := procState(pid); st != "" && ppid == me {
			out = append(out, pid)
		}
	}
	return out
}

// eventually polls cond every few milliseconds until it holds or d passes. It is a bounded
// wait for an effect of real processes, not a timing assertion.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// noLeaks checks, when the test ends, that every child process was reaped and no file
// descriptor is left open.
func noLeaks(t *testing.T) {
	t.Helper()
	fds := countFDs(t)
	t.Cleanup(func() {
		eventually(t, 5*time.Second, "child processes left unreaped", func() bool { return len(children(t)) == 0 })
		eventually(t, 5*time.Second, "file descriptors leaked", func() bool { return countFDs(t) <= fds })
	})
}

// gone reports whether pid no longer runs: absent, or a zombie of a parent that is not us
// (a killed grandchild is reparented to an init that may reap it late).
func gone(pid int) bool {
	st, _ := procState(pid)
	return st == "" || st == "Z"
}

// reaped reports whether our own child pid is fully gone: exited and waited for.
func reaped(pid int) bool {
	st, _ := procState(pid)
	return st == ""
}

func wantCode(t testing.TB, err error, code string) *capadapter.Error {
	t.Helper()
	var e *capadapter.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error, want %s", err, err, code)
	}
	if e.Code != code {
		t.Fatalf("code = %s (%v), want %s", e.Code, err, code)
	}
	if !errors.Is(err, &capadapter.Error{Code: code}) {
		t.Fatalf("errors.Is by code failed for %v", err)
	}
	return e
}

func startHelper(t *testing.T, mode string, opts ClientOptions, extra ...string) *Client {
	t.Helper()
	reg := helperRegistration(t, "h", mode, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	c, err := Start(ctx, reg.Command, reg.Args, opts)
	if err != nil {
		t.Fatalf("Start(%s): %v\nlogs: %q", mode, err, logsOf(c))
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func logsOf(c *Client) []string {
	if c == nil {
		return nil
	}
	return c.Logs()
}

func waitDone(t testing.TB, c *Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("client pid %d not done", c.PID())
	}
}
