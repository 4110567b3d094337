package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// fsProcess is a running airlock-fs serve.
type fsProcess struct {
	bin, socket, admin string
	cmd                *exec.Cmd
	stderr             *daemontest.SyncBuffer
	exited             chan struct{}
}

func startFS(t *testing.T, extra ...string) *fsProcess {
	t.Helper()
	dir := daemontest.ShortDir(t)
	p := &fsProcess{bin: daemontest.Binary(t, "airlock-fs"), socket: filepath.Join(dir, "run", "fs.sock"),
		admin: filepath.Join(dir, "run", "admin.sock"), stderr: &daemontest.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(p.bin, append([]string{"serve", "--socket", p.socket, "--admin-socket", p.admin, "--log-level", "debug"}, extra...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("airlock-fs stderr:\n%s", p.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, _, code := p.run(t, nil, "grants", "--admin-socket", p.admin); code == 0 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock-fs did not start:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run runs the airlock-fs CLI.
func (p *fsProcess) run(t *testing.T, stdin []byte, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runBin(t, p.bin, stdin, args...)
}

func runBin(t *testing.T, bin string, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func invoke(t *testing.T, c *client.Client, callID, op string, args map[string]any) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := int64(1)
	r, err := c.Call(ctx, client.Command{Operation: "invokeTool", SessionID: "agent-a", Generation: &g,
		Payload: map[string]any{"toolCallId": callID, "operation": op, "arguments": args}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func toolData(t *testing.T, r *client.Response) map[string]any {
	t.Helper()
	if !r.OK {
		t.Fatalf("invokeTool: %v", r.Err())
	}
	var res struct {
		Data map[string]any `json:"data"`
	}
	if err := r.Decode(&res); err != nil {
		t.Fatal(err)
	}
	return res.Data
}

// TestWalkthrough runs the README walkthrough with the real binaries: airlockd and airlock-fs,
// a grant, session open with the descriptor, the six operations through the daemon, idempotent
// replay, revoke-grant, and checks that the handle appears nowhere but the grant's output.
func TestWalkthrough(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	fsp := startFS(t)
	airlock := daemontest.Binary(t, "airlock")
	c := d.Dial()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	hs, err := c.Call(ctx, client.Command{Operation: "handshake"})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	host := hs.HostInstanceID

	root := filepath.Join(daemontest.ShortDir(t), "work")
	os.Mkdir(root, 0o700)
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello from the grant root\n"), 0o600)

	var outputs []string // everything printed, except the grant's descriptor
	desc, errOut, code := fsp.run(t, nil, "grant", "--admin-socket", fsp.admin, "--root", root,
		"--host-instance", host, "--session", "agent-a", "--generation", "1",
		"--operations", "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")
	if code != 0 {
		t.Fatalf("grant: %d %s", code, errOut)
	}
	var dm struct {
		Binding struct {
			CapabilityHandle string `json:"capabilityHandle"`
		} `json:"binding"`
	}
	if err := json.Unmarshal([]byte(desc), &dm); err != nil || len(dm.Binding.CapabilityHandle) < 32 {
		t.Fatalf("descriptor: %v %s", err, desc)
	}
	handle := dm.Binding.CapabilityHandle

	out, errOut, code := runBin(t, airlock, []byte(desc), "session", "open", "agent-a", "--generation", "1",
		"--cwd", root, "--descriptor", "-", "--socket", d.Socket)
	outputs = append(outputs, out, errOut)
	if code != 0 {
		t.Fatalf("session open: %d %s %s", code, out, errOut)
	}
	out, errOut, code = runBin(t, airlock, nil, "tool", "agent-a", "fs.read", "--generation", "1", "--arg", "path=notes.txt", "--socket", d.Socket)
	outputs = append(outputs, out, errOut)
	if code != 0 || out != "hello from the grant root\n" {
		t.Fatalf("airlock tool fs.read: %d %q %s", code, out, errOut)
	}

	if l := toolData(t, invoke(t, c, "c-list", "fs.list", map[string]any{"path": "."})); len(l["entries"].([]any)) != 1 {
		t.Fatalf("fs.list: %v", l)
	}
	if s := toolData(t, invoke(t, c, "c-stat", "fs.stat", map[string]any{"path": "notes.txt"})); s["size"] != 26.0 {
		t.Fatalf("fs.stat: %v", s)
	}
	if s := toolData(t, invoke(t, c, "c-search", "fs.search", map[string]any{"path": ".", "query": "grant"})); len(s["matches"].([]any)) != 1 {
		t.Fatalf("fs.search: %v", s)
	}
	w1 := toolData(t, invoke(t, c, "c-write", "fs.write", map[string]any{"path": "out.txt", "content": "v1\n"}))
	st1, _ := os.Stat(filepath.Join(root, "out.txt"))
	// A retry of the same tool call carries the same idempotency key: airlock-fs replays the
	// first result (created: true) instead of writing again (which would fail file_exists).
	time.Sleep(20 * time.Millisecond)
	if w2 := toolData(t, invoke(t, c, "c-write", "fs.write", map[string]any{"path": "out.txt", "content": "v1\n"})); !reflect.DeepEqual(w1, w2) || w1["created"] != true {
		t.Fatalf("replay: %v, first %v", w2, w1)
	}
	if st2, _ := os.Stat(filepath.Join(root, "out.txt")); !st2.ModTime().Equal(st1.ModTime()) {
		t.Fatal("the replay wrote again")
	}
	if r := invoke(t, c, "c-write", "fs.write", map[string]any{"path": "out.txt", "content": "v2\n", "overwrite": true}); r.OK || r.Error.Code != "idempotency_conflict" {
		t.Fatalf("conflict: %+v", r.Error)
	}
	if e := toolData(t, invoke(t, c, "c-edit", "fs.edit", map[string]any{"path": "out.txt", "edits": []any{map[string]any{"oldText": "v1", "newText": "v3"}}})); e["replacements"] != 1.0 {
		t.Fatalf("fs.edit: %v", e)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "out.txt")); string(b) != "v3\n" {
		t.Fatalf("out.txt: %q", b)
	}

	out, errOut, code = fsp.run(t, nil, "grants", "--admin-socket", fsp.admin, "--json")
	outputs = append(outputs, out, errOut)
	var gl struct {
		Grants []struct {
			GrantID   string `json:"grantId"`
			Connected bool   `json:"connected"`
		} `json:"grants"`
	}
	if err := json.Unmarshal([]byte(out), &gl); code != 0 || err != nil || len(gl.Grants) != 1 || !gl.Grants[0].Connected {
		t.Fatalf("grants: %d %s %s", code, out, errOut)
	}
	out, errOut, code = fsp.run(t, nil, "grants", "--admin-socket", fsp.admin)
	outputs = append(outputs, out, errOut)
	if code != 0 || !strings.Contains(out, gl.Grants[0].GrantID) || !strings.Contains(out, root) {
		t.Fatalf("grants: %d %s %s", code, out, errOut)
	}

	// revoke-grant closes the connection: the daemon reports the session's adapter closed.
	out, errOut, code = fsp.run(t, nil, "revoke-grant", "--admin-socket", fsp.admin, gl.Grants[0].GrantID)
	outputs = append(outputs, out, errOut)
	if code != 0 {
		t.Fatalf("revoke-grant: %d %s", code, errOut)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := invoke(t, c, "c-after", "fs.stat", map[string]any{"path": "notes.txt"})
		b, _ := json.Marshal(r)
		outputs = append(outputs, string(b))
		if !r.OK && r.Error.Code == "adapter_session_closed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after revoke-grant: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, errOut, code = fsp.run(t, nil, "revoke-grant", "--admin-socket", fsp.admin, gl.Grants[0].GrantID)
	if code != 1 || !strings.HasPrefix(errOut, "airlock-fs: grant_not_found: ") {
		t.Fatalf("second revoke-grant: %d %q", code, errOut)
	}
	out, errOut, code = runBin(t, airlock, nil, "session", "close", "agent-a", "--generation", "1", "--socket", d.Socket)
	outputs = append(outputs, out, errOut)
	if code != 0 {
		t.Fatalf("session close: %d %s", code, errOut)
	}

	// airlock-fs stops cleanly on SIGTERM and removes its sockets.
	fsp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-fsp.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("airlock-fs did not stop on SIGTERM")
	}
	if fsp.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("airlock-fs exit code %d", fsp.cmd.ProcessState.ExitCode())
	}
	for _, p := range []string{fsp.socket, fsp.admin} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s left behind", p)
		}
	}
	d.Stop()
	outputs = append(outputs, fsp.stderr.String(), d.Stderr())
	for _, o := range outputs {
		if strings.Contains(o, handle) {
			t.Fatalf("the capability handle leaked: %s", o)
		}
	}
}

func TestUsage(t *testing.T) {
	bin := daemontest.Binary(t, "airlock-fs")
	for _, args := range [][]string{{}, {"nope"}, {"grant", "--admin-socket", "/tmp/x.sock"}, {"revoke-grant"}, {"grants", "extra"},
		{"serve", "--bind-timeout", "0s"}, {"serve", "--max-connections-per-peer", "0"}} {
		if _, errOut, code := runBin(t, bin, nil, args...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("%v: exit %d %q", args, code, errOut)
		}
	}
	_, errOut, code := runBin(t, bin, nil, "grants", "--admin-socket", "/nonexistent/admin.sock")
	if code != 1 || !strings.HasPrefix(errOut, "airlock-fs: admin_unreachable: ") {
		t.Fatalf("unreachable: %d %q", code, errOut)
	}
}

// TestFlagsAfterArgument: a flag may follow the positional argument, as in airlock's own
// commands; "revoke-grant g-… --admin-socket PATH" was refused as a usage error ("takes 1
// argument(s)") before it reached the admin socket.
func TestFlagsAfterArgument(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run([]string{"revoke-grant", "g-x", "--admin-socket", "/nonexistent/admin.sock"}, &stdout, &stderr, nil)
	if code != exitFail || !strings.HasPrefix(stderr.String(), "airlock-fs: admin_unreachable: ") {
		t.Fatalf("revoke-grant g-x --admin-socket: exit %d %q", code, stderr.String())
	}
	stderr.Reset()
	code = run([]string{"revoke-grant", "g-x", "--admin-socket", "/nonexistent/admin.sock", "g-y"}, &stdout, &stderr, nil)
	if code != exitUsage || !strings.Contains(stderr.String(), "takes 1 argument(s)") {
		t.Fatalf("two grant ids: exit %d %q", code, stderr.String())
	}
	stderr.Reset()
	code = run([]string{"grants", "--admin-socket", "/nonexistent/admin.sock", "extra"}, &stdout, &stderr, nil)
	if code != exitUsage || !strings.Contains(stderr.String(), `unexpected argument "extra"`) {
		t.Fatalf("grants extra: exit %d %q", code, stderr.String())
	}
}

// TestCommandHelpExitsZero: --help of each command prints its flags and exits 0, as the
// top-level help does; an unknown flag is still a usage error.
func TestCommandHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"serve", "grant", "grants", "revoke-grant"} {
		var stdout, stderr strings.Builder
		if code := run([]string{cmd, "--help"}, &stdout, &stderr, nil); code != exitOK || !strings.Contains(stderr.String(), "-admin-socket") {
			t.Errorf("%s --help: exit %d %q", cmd, code, stderr.String())
		}
	}
	var stdout, stderr strings.Builder
	if code := run([]string{"grants", "--no-such-flag"}, &stdout, &stderr, nil); code != exitUsage {
		t.Errorf("an unknown flag: exit %d", code)
	}
}

// TestRetryAfterDaemonCrashAppliesOnce: an fs.edit is applied, airlockd is killed with SIGKILL
// and restarted, the quarantined session is reprovisioned with a new grant from the same
// airlock-fs, and the call is retried with the same toolCallId, as docs/tool-adapters.md
// advises for an indeterminate outcome. airlock-fs remembers idempotency keys per session
// generation, not per grant, so the retry gets the first outcome and the edit is not applied
// twice; another session's call with the same toolCallId is its own call and runs.
func TestRetryAfterDaemonCrashAppliesOnce(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	fsp := startFS(t)
	airlock := daemontest.Binary(t, "airlock")
	root := filepath.Join(daemontest.ShortDir(t), "work")
	os.Mkdir(root, 0o700)
	file := filepath.Join(root, "count.txt")
	os.WriteFile(file, []byte("A\n"), 0o600)

	provision := func(d *daemontest.Daemon, session string) {
		t.Helper()
		c := d.Dial()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hs, err := c.Call(ctx, client.Command{Operation: "handshake"})
		cancel()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		desc, errOut, code := fsp.run(t, nil, "grant", "--admin-socket", fsp.admin, "--root", root,
			"--host-instance", hs.HostInstanceID, "--session", session, "--generation", "1", "--operations", "fs.read,fs.edit")
		if code != 0 {
			t.Fatalf("grant: %d %s", code, errOut)
		}
		if out, errOut, code := runBin(t, airlock, []byte(desc), "session", "open", session, "--generation", "1",
			"--cwd", root, "--descriptor", "-", "--socket", d.Socket); code != 0 {
			t.Fatalf("session open %s: %d %s %s", session, code, out, errOut)
		}
	}
	edit := map[string]any{"path": "count.txt", "edits": []any{map[string]any{"oldText": "A", "newText": "AB"}}}

	provision(d, "agent-a")
	c := d.Dial()
	first := toolData(t, invoke(t, c, "c-edit", "fs.edit", edit))
	c.Close()
	if b, _ := os.ReadFile(file); string(b) != "AB\n" {
		t.Fatalf("after the edit: %q", b)
	}

	d.Kill9()
	d2 := daemontest.Start(t, daemontest.Options{Socket: d.Socket, StateDir: d.StateDir})
	c2 := d2.Dial()
	if r := invoke(t, c2, "c-edit", "fs.edit", edit); r.OK || r.Error.Code != "tool_adapter_reprovision_required" {
		t.Fatalf("before reprovisioning: %+v", r.Error)
	}
	provision(d2, "agent-a")
	again := toolData(t, invoke(t, c2, "c-edit", "fs.edit", edit))
	if !reflect.DeepEqual(first, again) {
		t.Fatalf("retry answered %v, the first call %v", again, first)
	}
	if b, _ := os.ReadFile(file); string(b) != "AB\n" {
		t.Fatalf("the retried edit was applied twice: %q", b)
	}
	out, _, _ := fsp.run(t, nil, "grants", "--admin-socket", fsp.admin, "--json")
	if n := strings.Count(out, `"grantId"`); n != 2 {
		t.Fatalf("grants: want the crashed host's and the reprovisioned one, got %d: %s", n, out)
	}

	// agent-b's call with the same toolCallId sends the same key; it is another session's
	// call, so it runs.
	provision(d2, "agent-b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := int64(1)
	r, err := c2.Call(ctx, client.Command{Operation: "invokeTool", SessionID: "agent-b", Generation: &g,
		Payload: map[string]any{"toolCallId": "c-edit", "operation": "fs.edit", "arguments": edit}})
	if err != nil || !r.OK {
		t.Fatalf("agent-b: %v %+v", err, r)
	}
	if b, _ := os.ReadFile(file); string(b) != "ABB\n" {
		t.Fatalf("agent-b's edit: %q", b)
	}
	c2.Close()
}
