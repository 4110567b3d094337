package conformance_test

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

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/validate"
)

// testQueue is the CUPS queue the test creates on its private cupsd.
const testQueue = "airlock-test"

// cupsTools are the CUPS programs the test needs: the scheduler, queue administration, and
// the client that the adapter runs.
var cupsTools = []string{"cupsd", "lpadmin", "lpstat", "cupsdisable", "cupsenable", "cupsreject"}

// cups is a private cupsd: its own configuration, spool and state in a temporary directory,
// listening only on a Unix socket there, so the system's CUPS (if any) is untouched.
type cups struct {
	dir    string
	socket string
	tools  map[string]string
}

// startCUPS starts a private cupsd in the foreground and stops it when the test ends. It
// skips the test when CUPS is not installed or the test does not run as root.
func startCUPS(t *testing.T) *cups {
	t.Helper()
	c := &cups{tools: map[string]string{}}
	for _, name := range cupsTools {
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
			t.Skipf("CUPS is not installed (%s not found): install the Debian packages cups, cups-client "+
				"and cups-bsd to run the cups-printer test", name)
		}
		c.tools[name] = p
	}
	if os.Geteuid() != 0 {
		t.Skip("the cups-printer test starts a private cupsd, which must run as root")
	}
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
	c.dir, c.socket = dir, filepath.Join(dir, "cups.sock")
	for _, sub := range []string{"spool", "tmp", "cache", "state", "log", "ppd"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// FileDevice lets the queue print to file:///dev/null: a queue with no printer behind it.
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
`, c.socket)
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
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
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

	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("cupsd exited at start: %v", err)
		default:
		}
		if o, err := c.run("lpstat", "-r"); err == nil && strings.Contains(o, "scheduler is running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cupsd did not start answering within 15s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

// run runs a CUPS tool against the private cupsd and returns its output.
func (c *cups) run(tool string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.tools[tool], append([]string{"-h", c.socket}, args...)...)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *cups) must(t *testing.T, tool string, args ...string) {
	t.Helper()
	if out, err := c.run(tool, args...); err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
}

type printerState struct {
	State         string `json:"state"`
	AcceptingJobs bool   `json:"acceptingJobs"`
}

func TestCUPSPrinter(t *testing.T) {
	python := python3(t)
	c := startCUPS(t)
	// A raw queue (no driver) that prints to /dev/null, enabled and accepting jobs.
	c.must(t, "lpadmin", "-p", testQueue, "-E", "-v", "file:///dev/null")
	t.Cleanup(func() {
		if out, err := c.run("lpadmin", "-x", testQueue); err != nil {
			t.Errorf("lpadmin -x %s: %v\n%s", testQueue, err, out)
		}
	})
	// The queue and the server are in the adapter's config file, never in its arguments.
	config := writeJSON(t, t.TempDir(), "printer.json", map[string]string{"queue": testQueue, "server": c.socket})
	printer := adapterFile(t, "cups-printer", "printer.py")

	conform(t, validate.Config{Command: python, Args: []string{printer, config}})

	a := startAdapter(t, python, printer, config)
	const id = "printer_status"
	var st printerState
	var seen [][]byte
	expect := func(what string, want printerState) {
		t.Helper()
		raw := observe(t, a, id, &st)
		seen = append(seen, raw)
		if st != want {
			t.Errorf("%s: observe = %s, want %+v", what, raw, want)
		}
	}
	expect("a new queue", printerState{State: "idle", AcceptingJobs: true})
	c.must(t, "cupsdisable", testQueue)
	expect("after cupsdisable", printerState{State: "stopped", AcceptingJobs: true})
	c.must(t, "cupsreject", testQueue)
	expect("after cupsreject", printerState{State: "stopped", AcceptingJobs: false})
	c.must(t, "cupsenable", testQueue)
	expect("after cupsenable", printerState{State: "idle", AcceptingJobs: false})

	// Neither the queue nor the server leaves the adapter.
	assertHidden(t, []string{testQueue, c.socket, c.dir}, append(seen, descriptorsJSON(t, a))...)

	// A queue that does not exist: the adapter starts (it asks CUPS only when observed) and
	// answers unavailable.
	missing := writeJSON(t, t.TempDir(), "missing.json", map[string]string{"queue": "no-such-queue", "server": c.socket})
	m := startAdapter(t, python, printer, missing)
	if _, err := m.Observe(callCtx(t), id); capadapter.CodeOf(err) != capadapter.CodeUnavailable {
		t.Errorf("observe of a missing queue: %v, want unavailable", err)
	}
}
