package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/cupstest"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// envQueue is the CUPS queue TestCUPSPrinterServerFromEnvironment creates on its private
// cupsd; no system queue is likely to have the name.
const envQueue = "airlock-passenv-q3"

// TestCUPSPrinterServerFromEnvironment: the cups-printer adapter, whose config names only the
// queue, takes the CUPS server from CUPS_SERVER. airlockd has the private cupsd's socket in
// CUPS_SERVER; the registration names the variable (--pass-env CUPS_SERVER), and observe
// follows the real queue: idle, stopped after cupsdisable, idle after cupsenable. The
// validator runs it the same way. Registered without the name, the adapter cannot reach the
// queue (no HOME, no client.conf of ours): observe fails unavailable, and after three, cap
// list shows it calls_unavailable. The variable's value, the socket path, is in no status,
// adapter list, daemon log line or the state file.
func TestCUPSPrinterServerFromEnvironment(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the cups-printer adapter is Python")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The interpreter itself, not a version manager's shim: an adapter gets PATH and HOME but
	// not a shim's own variables.
	out, err := exec.CommandContext(ctx, "python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatal(err)
	}
	python := strings.TrimSpace(string(out))
	c := cupstest.Start(t)
	c.AddQueue(t, envQueue)
	config := filepath.Join(t.TempDir(), "printer.json")
	if err := os.WriteFile(config, []byte(`{"queue": "`+envQueue+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	printer := exampleFile(t, "cups-printer", "printer.py")
	// The validator (in this process) and the daemon both have the socket in CUPS_SERVER.
	t.Setenv("CUPS_SERVER", c.Socket)
	saved := faultAdapter
	faultAdapter = nil // this test is about the adapter, not the runtime's fault handling
	t.Cleanup(func() { faultAdapter = saved })
	r := runValidate(t, "--pass-env", "CUPS_SERVER", "--", python, printer, config)
	if r.code != exitOK || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("validate with --pass-env CUPS_SERVER: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	d := daemontest.Start(t, daemontest.Options{Env: []string{"CUPS_SERVER=" + c.Socket}})
	cli(t, d.Socket, "", "adapter", "register", "printer", "--pass-env", "CUPS_SERVER", "--", python, printer, config).wantCode(t, exitOK)
	type state struct {
		State         string `json:"state"`
		AcceptingJobs bool   `json:"acceptingJobs"`
	}
	expect := func(what string, want state) {
		t.Helper()
		r := cli(t, d.Socket, "", "cap", "observe", "--id", "printer_status", "--json").wantCode(t, exitOK)
		var got struct {
			Data struct {
				Result state `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Data.Result != want {
			t.Fatalf("%s: observe = %s (%v), want %+v", what, r.stdout, err, want)
		}
	}
	expect("a new queue", state{State: "idle", AcceptingJobs: true})
	c.Must(t, "cupsdisable", envQueue)
	expect("after cupsdisable", state{State: "stopped", AcceptingJobs: true})
	c.Must(t, "cupsenable", envQueue)
	expect("after cupsenable", state{State: "idle", AcceptingJobs: true})
	list := cli(t, d.Socket, "", "adapter", "list").wantCode(t, exitOK)
	if !strings.Contains(list.stdout, "CUPS_SERVER") {
		t.Fatalf("adapter list does not show the passed name:\n%s", list.stdout)
	}
	listJSON := cli(t, d.Socket, "", "adapter", "list", "--json").wantCode(t, exitOK)
	status := cli(t, d.Socket, "", "status", "--json").wantCode(t, exitOK)

	// Without the name, the same adapter has no way to the queue.
	cli(t, d.Socket, "", "adapter", "register", "printer", "--", python, printer, config).wantCode(t, exitOK)
	for i := range 3 {
		r := cli(t, d.Socket, "", "cap", "observe", "--id", "printer_status")
		if r.code != exitFailure || !strings.Contains(r.stderr, "unavailable") {
			t.Fatalf("observe %d without CUPS_SERVER: exit %d %q", i+1, r.code, r.stderr)
		}
	}
	caps := cli(t, d.Socket, "", "cap", "list").wantCode(t, exitOK)
	if !strings.Contains(caps.stdout, "false (calls_unavailable)") {
		t.Fatalf("cap list after three unavailable observes:\n%s", caps.stdout)
	}
	d.Stop()

	db, err := os.ReadFile(filepath.Join(d.StateDir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"adapter list": list.stdout + listJSON.stdout, "status": status.stdout,
		"daemon log": d.Stderr(), "state file": string(db)} {
		if strings.Contains(text, c.Socket) {
			t.Errorf("the CUPS_SERVER value is in the %s", what)
		}
	}
}
