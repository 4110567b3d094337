// Package cupstest starts a private CUPS scheduler for the tests that run the cups-printer
// example adapter against a real queue (the adapter's conformance test and the two-daemon
// room test). It is imported by tests only.
//
// The scheduler has its own configuration, spool and state in a temporary directory and
// listens only on a Unix socket there, so the system's CUPS (if any) is untouched. It must
// run as root; CI runs as root and installs the Debian packages cups, cups-client and
// cups-bsd.
package cupstest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tools are the CUPS programs the tests need: the scheduler, queue administration, and the
// client that the adapter runs.
var tools = []string{"cupsd", "lpadmin", "lpstat", "cupsdisable", "cupsenable", "cupsreject"}

// startTimeout bounds how long cupsd may take to answer lpstat -r; toolTimeout bounds one
// run of a CUPS tool; stopTimeout bounds cupsd's exit after SIGTERM.
const (
	startTimeout = 15 * time.Second
	toolTimeout  = 10 * time.Second
	stopTimeout  = 10 * time.Second
)

// CUPS is a running private cupsd.
type CUPS struct {
	// Dir is the scheduler's directory: configuration, spool, state and logs.
	Dir string
	// Socket is the Unix socket it listens on, which a client passes as -h (and the
	// cups-printer adapter's config as "server").
	Socket string
	tools  map[string]string
}

func find() (map[string]string, error) {
	found := map[string]string{}
	for _, name := range tools {
		p, err := exec.LookPath(name)
		if err != nil {
			// PATH may lack the sbin directories of a non-root user.
			for _, dir := range []string{"/usr/sbin", "/sbin"} {
				if _, serr := os.Stat(filepath.Join(dir, name)); serr == nil {
					p, err = filepath.Join(dir, name), nil
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("CUPS is not installed (%s not found): install the Debian packages cups, cups-client and cups-bsd", name)
		}
		found[name] = p
	}
	return found, nil
}

// Start starts a private cupsd in the foreground and stops it when the test ends. When CUPS
// cannot run here (not installed, or the test is not root) it skips the test, or fails it
// under CI=true, where .ci/run installs CUPS and runs as root.
func Start(t testing.TB) *CUPS {
	t.Helper()
	c, why := TryStart(t)
	if c == nil {
		t.Skipf("%s: skipping the CUPS printer test", why)
	}
	return c
}

// TryStart is Start for a test of which CUPS is only a part: when CUPS cannot run here it
// returns nil and the reason, and the test skips that part (under CI=true it fails the test
// instead, as Start does).
func TryStart(t testing.TB) (*CUPS, string) {
	t.Helper()
	found, err := find()
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case os.Geteuid() != 0:
		why = "a private cupsd must run as root"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s; CI needs it", why)
		}
		return nil, why
	}
	c := &CUPS{tools: found}
	// Not t.TempDir: cupsd's helpers run as the lp user and need to traverse the directory;
	// and the socket path must stay short.
	dir, err := os.MkdirTemp("", "airlock-cups-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.Dir, c.Socket = dir, filepath.Join(dir, "cups.sock")
	for _, sub := range []string{"spool", "tmp", "cache", "state", "log", "ppd"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// FileDevice lets a queue print to file:///dev/null: a queue with no printer behind it.
	files := fmt.Sprintf(`ServerRoot %[1]s
RequestRoot %[1]s/spool
TempDir %[1]s/tmp
CacheDir %[1]s/cache
StateDir %[1]s/state
AccessLog %[1]s/log/access_log
ErrorLog %[1]s/log/error_log
PageLog %[1]s/log/page_log
FileDevice Yes
SystemGroup root
Sandboxing Relaxed
`, dir)
	conf := fmt.Sprintf(`Listen %s
Browsing No
WebInterface No
LogLevel warn
<Location />
  Order allow,deny
  Allow localhost
</Location>
`, c.Socket)
	filesPath, confPath := filepath.Join(dir, "cups-files.conf"), filepath.Join(dir, "cupsd.conf")
	for p, text := range map[string]string{filesPath: files, confPath: conf} {
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer
	cmd := exec.Command(c.tools["cupsd"], "-f", "-c", confPath, "-s", filesPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cupsd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("cupsd did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("cupsd output: %s", out.String())
			if log, err := os.ReadFile(filepath.Join(dir, "log", "error_log")); err == nil {
				t.Logf("cupsd error_log:\n%s", log)
			}
		}
	})

	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("cupsd exited at start: %v", err)
		default:
		}
		if o, err := c.Run("lpstat", "-r"); err == nil && strings.Contains(o, "scheduler is running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cupsd did not start answering within %v", startTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c, ""
}

// Run runs a CUPS tool (one of cupsd, lpadmin, lpstat, cupsdisable, cupsenable, cupsreject)
// against the private cupsd and returns its output.
func (c *CUPS) Run(tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.tools[tool], append([]string{"-h", c.Socket}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Must runs a CUPS tool and fails the test if it fails.
func (c *CUPS) Must(t testing.TB, tool string, args ...string) {
	t.Helper()
	if out, err := c.Run(tool, args...); err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
}

// AddQueue creates a raw queue (no driver) named name that prints to /dev/null, enabled and
// accepting jobs, and deletes it when the test ends.
func (c *CUPS) AddQueue(t testing.TB, name string) {
	t.Helper()
	c.Must(t, "lpadmin", "-p", name, "-E", "-v", "file:///dev/null")
	t.Cleanup(func() {
		if out, err := c.Run("lpadmin", "-x", name); err != nil {
			t.Errorf("lpadmin -x %s: %v\n%s", name, err, out)
		}
	})
}
