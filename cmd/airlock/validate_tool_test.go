package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/validate"
)

// startAirlockFS runs airlock-fs serve and returns its serving and admin sockets.
func startAirlockFS(t *testing.T) (bin, socket, admin string) {
	t.Helper()
	dir := daemontest.ShortDir(t)
	bin = daemontest.Binary(t, "airlock-fs")
	socket, admin = filepath.Join(dir, "run", "fs.sock"), filepath.Join(dir, "run", "admin.sock")
	var stderr daemontest.SyncBuffer
	cmd := exec.Command(bin, "serve", "--socket", socket, "--admin-socket", admin)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("airlock-fs stderr:\n%s", stderr.String())
		}
	})
	waitFor(t, "airlock-fs", func() bool { return exec.Command(bin, "grants", "--admin-socket", admin).Run() == nil })
	return bin, socket, admin
}

func runValidateTool(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := run(ctx, append([]string{"validate", "tool-adapter"}, args...), strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func TestValidateToolAdapter(t *testing.T) {
	bin, socket, admin := startAirlockFS(t)
	scratch := filepath.Join(daemontest.ShortDir(t), "scratch")
	os.Mkdir(scratch, 0o700)
	var desc, errb bytes.Buffer
	grant := exec.Command(bin, "grant", "--admin-socket", admin, "--root", scratch, "--host-instance", "host-cli",
		"--session", "validate", "--generation", "1", "--operations", "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")
	grant.Stdout, grant.Stderr = &desc, &errb
	if err := grant.Run(); err != nil {
		t.Fatalf("grant: %v %s", err, errb.String())
	}
	handle := desc.String()[strings.Index(desc.String(), `"capabilityHandle":"`)+20:][:43]

	r := runValidateTool(t, desc.String(), "--socket", socket, "--descriptor", "-", "--scratch", scratch).wantCode(t, exitOK)
	for _, want := range []string{"PASS bind", "PASS fs.list", "PASS fs.edit", "PASS traversal", "PASS bounds", "PASS idempotency",
		"PASS abort", "PASS revoke", "PASS identity", "PASS frames", "PASS handle_not_reflected", "PASS bind_refused", "PASS search_results", "PASS: 18 passed, 0 failed, 0 skipped of 18 probes"} {
		if !slices.Contains(strings.Split(r.stdout, "\n"), want) {
			t.Errorf("no line %q in\n%s", want, r.stdout)
		}
	}

	// The same grant binds again once the last connection ended; --json reports the probes.
	descFile := filepath.Join(t.TempDir(), "descriptor.json")
	os.WriteFile(descFile, desc.Bytes(), 0o600)
	r = runValidateTool(t, "", "--descriptor", descFile, "--scratch", scratch, "--json").wantCode(t, exitOK)
	var rep validate.Report
	decode(t, envelopeOf(t, r, "validate tool-adapter", true).Data, &rep)
	if !rep.Pass || rep.Passed != 18 || len(rep.Probes) != 18 {
		t.Fatalf("report: %+v", rep)
	}

	// No adapter on the socket: the bind probe fails, and so does the command.
	r = runValidateTool(t, desc.String(), "--socket", filepath.Join(filepath.Dir(socket), "none.sock"), "--descriptor", "-",
		"--scratch", scratch).wantCode(t, exitFailure)
	if !strings.HasPrefix(r.stdout, "PASS descriptor\nFAIL bind: ") || !strings.Contains(r.stdout, "\nFAIL: 1 passed, 17 failed, 0 skipped of 18 probes\n") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "conformance") {
		t.Errorf("stderr: %s", r.stderr)
	}
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.Contains(out, handle) {
			t.Error("the output holds the capability handle")
		}
	}
}

func TestValidateToolAdapterUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--descriptor", "-"},
		{"--scratch", "/tmp"},
		{"--descriptor", "-", "--scratch", "/tmp", "extra"},
	} {
		r := runValidateTool(t, "{}", args...).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, "airlock validate tool-adapter -h") {
			t.Errorf("%v: stderr %s", args, r.stderr)
		}
	}
	r := runValidateTool(t, "not json", "--descriptor", "-", "--scratch", "/tmp").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "not a JSON object") {
		t.Errorf("stderr: %s", r.stderr)
	}
	r = runValidateTool(t, "", "-h").wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "usage: airlock validate tool-adapter --socket PATH") || !strings.Contains(r.stdout, "-scratch") {
		t.Errorf("help:\n%s", r.stdout)
	}
}
