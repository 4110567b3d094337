// Package daemontest runs the real airlock binaries for integration tests: it builds them once
// per test process (with -race when the tests run with -race), starts airlockd on a socket under
// a short temporary root, and stops or kills it.
package daemontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
)

// startTimeout bounds how long a started daemon may take to answer on its socket; a build with
// -race on a loaded two-core machine can take a few seconds.
const startTimeout = 20 * time.Second

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// Binary builds ./cmd/<name> once per test process and returns the executable's path.
func Binary(t testing.TB, name string) string {
	t.Helper()
	return Build(t, "./cmd/"+name)
}

// Build builds the main package at pkg (relative to the module root, such as
// "./examples/adapters/go-lamp") once per test process and returns the executable's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "airlock-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, filepath.Base(pkg))
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// TestingM is what a package's TestMain runs: *testing.M, or a wrapper of it such as
// goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

// Main returns m whose Run also removes the executables Build made once the tests have run,
// so that a test process leaves none behind (each is tens of megabytes). A package whose
// tests call Build runs its tests through it:
//
//	goleak.VerifyTestMain(daemontest.Main(m))
func Main(m TestingM) TestingM { return cleaningM{m} }

type cleaningM struct{ m TestingM }

func (c cleaningM) Run() int {
	defer removeBuilt()
	return c.m.Run()
}

// removeBuilt removes the executables Build made, and forgets them.
func removeBuilt() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	buildDir, built = "", map[string]string{}
}

func moduleRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("daemontest: cannot locate source")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("daemontest: go.mod not found")
		}
		dir = parent
	}
}

// ShortDir returns a fresh 0700 directory under /tmp whose path is short enough for Unix
// socket names (sun_path holds 108 bytes; a long $TMPDIR would not fit). It is removed at the
// end of the test.
func ShortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "al-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Daemon is a running airlockd process.
type Daemon struct {
	t        testing.TB
	Socket   string
	StateDir string
	Cmd      *exec.Cmd
	stderr   *SyncBuffer
	exited   chan struct{}
	exitErr  error
}

// Options configure Start.
type Options struct {
	Socket   string   // default: <ShortDir>/run/airlockd.sock
	StateDir string   // default: <ShortDir>/state
	Args     []string // more flags
	Env      []string // extra environment
	// NoWait returns as soon as the process started, without waiting for the socket.
	NoWait bool
	// ListeningOnly waits until the socket answers a handshake, not until the host is ready.
	ListeningOnly bool
	// Defaults passes neither --socket nor --state-dir, so the daemon picks its default paths
	// from Env; Socket must still name where that puts the socket, for the readiness wait.
	Defaults bool
}

// Start starts airlockd and waits until it answers a handshake. The daemon is stopped (SIGTERM,
// then SIGKILL) at the end of the test.
func Start(t testing.TB, opts Options) *Daemon {
	t.Helper()
	if opts.Socket == "" || opts.StateDir == "" {
		root := ShortDir(t)
		if opts.Socket == "" {
			opts.Socket = filepath.Join(root, "run", "airlockd.sock")
		}
		if opts.StateDir == "" {
			opts.StateDir = filepath.Join(root, "state")
		}
	}
	args := []string{"--log-level", "debug"}
	if !opts.Defaults {
		args = append(args, "--socket", opts.Socket, "--state-dir", opts.StateDir)
	}
	args = append(args, opts.Args...)
	cmd := exec.Command(Binary(t, "airlockd"), args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	d := &Daemon{t: t, Socket: opts.Socket, StateDir: opts.StateDir, Cmd: cmd, stderr: &SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		d.exitErr = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("airlockd stderr:\n%s", d.Stderr())
		}
	})
	switch {
	case opts.NoWait:
	case opts.ListeningOnly:
		d.WaitListening()
	default:
		d.WaitReady()
	}
	return d
}

// WaitReady waits until the daemon reports host.ready: it is listening and its recovery has
// finished.
func (d *Daemon) WaitReady() {
	d.t.Helper()
	d.wait(true)
}

// WaitListening waits until the socket accepts a handshake, ready or not.
func (d *Daemon) WaitListening() {
	d.t.Helper()
	d.wait(false)
}

func (d *Daemon) wait(ready bool) {
	d.t.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-d.exited:
			d.t.Fatalf("airlockd exited during startup: %v\n%s", d.exitErr, d.Stderr())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := client.Dial(ctx, d.Socket)
		if err == nil {
			var r *client.Response
			r, err = c.Call(ctx, client.Command{Operation: "handshake"})
			if err == nil && ready {
				var h struct {
					Host struct {
						Ready bool `json:"ready"`
					} `json:"host"`
				}
				if err = r.Decode(&h); err == nil && !h.Host.Ready {
					err = errors.New("host not ready yet")
				}
			}
			c.Close()
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("airlockd did not answer within %v: %v\n%s", startTimeout, err, d.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Dial connects a client, closed at the end of the test.
func (d *Daemon) Dial() *client.Client {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, d.Socket)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { c.Close() })
	return c
}

// Stderr returns what the daemon logged so far.
func (d *Daemon) Stderr() string { return d.stderr.String() }

// WaitStderr waits until what the daemon logged matches re, as SyncBuffer.Wait does, and
// returns the match.
func (d *Daemon) WaitStderr(what string, re *regexp.Regexp) string {
	d.t.Helper()
	return d.stderr.Wait(d.t, what, re)
}

// Exited is closed when the process has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.exited }

// ExitCode waits for the process and returns its exit code (-1 when killed by a signal).
func (d *Daemon) ExitCode(timeout time.Duration) (int, error) {
	select {
	case <-d.exited:
	case <-time.After(timeout):
		return 0, errors.New("daemontest: process did not exit")
	}
	var ee *exec.ExitError
	if errors.As(d.exitErr, &ee) {
		return ee.ExitCode(), nil
	}
	if d.exitErr != nil {
		return 0, d.exitErr
	}
	return 0, nil
}

// Signal sends sig to the daemon.
func (d *Daemon) Signal(sig os.Signal) {
	d.Cmd.Process.Signal(sig)
}

// Kill9 kills the daemon with SIGKILL and waits for it, as a crash would.
func (d *Daemon) Kill9() {
	d.t.Helper()
	d.Cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
}

// KillManagedFS SIGKILLs the airlock-fs child the daemon runs (the last one its log says it
// started), as a crash of it would, and waits until the daemon's log says it saw it exit.
func (d *Daemon) KillManagedFS(t testing.TB) {
	t.Helper()
	ms := regexp.MustCompile(`airlock-fs started[^\n]*pid=(\d+)`).FindAllStringSubmatch(d.Stderr(), -1)
	if len(ms) == 0 {
		t.Fatalf("no airlock-fs start in the daemon's log:\n%s", d.Stderr())
	}
	pid, _ := strconv.Atoi(ms[len(ms)-1][1])
	exits := strings.Count(d.Stderr(), "airlock-fs exited")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !WaitFor(30*time.Second, func() bool { return strings.Count(d.Stderr(), "airlock-fs exited") > exits }) {
		t.Fatalf("the daemon did not see its airlock-fs exit:\n%s", d.Stderr())
	}
}

// Stop sends SIGTERM and waits; after 30 s it kills the process.
func (d *Daemon) Stop() {
	select {
	case <-d.exited:
		return
	default:
	}
	d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		d.Cmd.Process.Kill()
		<-d.exited
	}
}

// SyncBuffer is a bytes.Buffer that a running process or command writes while a test reads it.
// Its zero value is ready to use.
type SyncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	grew chan struct{} // closed by the next Write, when a Wait made it
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grew != nil {
		close(b.grew)
		b.grew = nil
	}
	return b.buf.Write(p)
}

// Wait waits until what was written matches re, for up to a minute, and returns the match; it
// fails the test, naming what it waited for, when that does not come. It wakes at each write:
// an event, not a poll.
func (b *SyncBuffer) Wait(t testing.TB, what string, re *regexp.Regexp) string {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		m := re.Find(b.buf.Bytes())
		if m != nil {
			b.mu.Unlock()
			return string(m)
		}
		if b.grew == nil {
			b.grew = make(chan struct{})
		}
		grew := b.grew
		b.mu.Unlock()
		select {
		case <-grew:
		case <-timeout.C:
			t.Fatalf("waited a minute for %s; written:\n%s", what, b.String())
		}
	}
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// String describes the daemon for test messages.
func (d *Daemon) String() string { return fmt.Sprintf("airlockd(%s)", d.Socket) }
