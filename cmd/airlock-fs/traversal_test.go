package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestTraversalCorpusThroughDaemon sends a corpus of hostile paths through the whole chain —
// client → airlockd (its own path checks) → airlock-fs (openat2 beneath the grant root) — with
// every operation. Nothing outside the root may be read, listed, found or changed: secrets
// sit in a sibling directory, in a sibling whose name shares the root's prefix (the 2025 MCP
// filesystem-server bypass), and behind symlinks placed inside the root.
func TestTraversalCorpusThroughDaemon(t *testing.T) {
	d := daemontest.Start(t, daemontest.Options{})
	fsp := startFS(t)
	c := d.Dial()
	host := callOp(t, c, "handshake", nil).HostInstanceID

	base := daemontest.ShortDir(t)
	root := filepath.Join(base, "allowed")
	evil := filepath.Join(base, "allowed_evil")
	outside := filepath.Join(base, "outside")
	const secret = "TOP-SECRET-7d1c"
	for _, dir := range []string{root, evil, outside, filepath.Join(root, "sub")} {
		os.MkdirAll(dir, 0o700)
	}
	os.WriteFile(filepath.Join(evil, "secret.txt"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(root, "notes.txt"), []byte("inside\n"), 0o600)
	os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "out-file"))
	os.Symlink(outside, filepath.Join(root, "out-dir"))
	os.Symlink("notes.txt", filepath.Join(root, "in-link"))
	os.Symlink("/", filepath.Join(root, "slash"))
	os.Symlink("../allowed_evil", filepath.Join(root, "sub", "evil"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600)
	snapshot := func() string {
		var b strings.Builder
		for _, dir := range []string{evil, outside, base} {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
				b.WriteString(dir + "/" + e.Name() + "=" + string(data) + "\n")
			}
		}
		return b.String()
	}
	before := snapshot()

	desc, errOut, code := fsp.run(t, nil, "grant", "--admin-socket", fsp.admin, "--root", root,
		"--host-instance", host, "--session", "agent-a", "--generation", "1",
		"--operations", "fs.list,fs.stat,fs.read,fs.search,fs.write,fs.edit")
	if code != 0 {
		t.Fatalf("grant: %s", errOut)
	}
	var raw json.RawMessage = []byte(desc)
	open := map[string]any{"cwd": root, "session": map[string]any{"mode": "memory"},
		"resources": map[string]any{"extensions": "none", "skills": "none", "promptTemplates": "none", "themes": "none",
			"contextFiles": "none", "tools": map[string]any{"mode": "host-adapter", "descriptor": raw}}}
	if r := callOp(t, c, "open", open); !r.OK {
		t.Fatalf("open: %v", r.Err())
	}

	paths := []string{
		"..", "../", "../..", "../outside/secret.txt", "../allowed_evil/secret.txt", "sub/../../outside/secret.txt",
		"sub/../..", "./..", "a/../..", "notes.txt/..", "notes.txt/../../outside/secret.txt",
		"/", "/etc/passwd", filepath.Join(outside, "secret.txt"), "//etc/passwd", "/../outside",
		"..\\outside\\secret.txt", "sub\\..\\..\\outside", "\\\\server\\share",
		"notes.txt\x00", "\x00", "a\x00/../../outside", "\x01", "sub/\x1f", "a\x7fb", "a\u0085b", "\n..", "..\n",
		"a//b", "./notes.txt", "sub/./notes.txt", "sub/", "notes.txt/", ".//", "sub//..",
		strings.Repeat("a", 5000), strings.Repeat("a/", 2100) + "x", strings.Repeat("b", 300),
		"\u2025", "\u2025/outside", "．．/outside", "%2e%2e/outside", "..%2foutside", "..\u2215outside",
		"\uff0e\uff0e/outside/secret.txt", "..;/outside", "...", ".../outside",
		"out-file", "out-dir", "out-dir/secret.txt", "in-link", "slash", "slash/etc/passwd",
		"sub/evil", "sub/evil/secret.txt", "fifo", "sub/fifo/..",
	}
	operations := []struct {
		op    string
		args  func(p string) map[string]any
		write bool
	}{
		{"fs.read", func(p string) map[string]any { return map[string]any{"path": p} }, false},
		{"fs.stat", func(p string) map[string]any { return map[string]any{"path": p} }, false},
		{"fs.list", func(p string) map[string]any { return map[string]any{"path": p} }, false},
		{"fs.search", func(p string) map[string]any { return map[string]any{"path": p, "query": "SECRET"} }, false},
		{"fs.write", func(p string) map[string]any { return map[string]any{"path": p, "content": "x", "overwrite": true} }, true},
		{"fs.edit", func(p string) map[string]any {
			return map[string]any{"path": p, "edits": []map[string]any{{"oldText": secret, "newText": "pwned"}}}
		}, true},
	}
	n := 0
	for _, o := range operations {
		for i, p := range paths {
			n++
			r := invoke(t, c, o.op+"-"+strconv.Itoa(i), o.op, o.args(p))
			line, _ := json.Marshal(r)
			if strings.Contains(string(line), secret) {
				t.Fatalf("%s %q leaked the secret: %s", o.op, p, line)
			}
			if r.OK && !o.write {
				t.Errorf("%s %q succeeded: %s", o.op, p, line)
			}
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("something outside the root changed:\nbefore %s\nafter %s", before, after)
	}
	if n < 100 {
		t.Fatalf("corpus of %d cases, want at least 100", n)
	}
	t.Logf("%d hostile requests through airlockd and airlock-fs, nothing escaped", n)
}

// callOp sends one command; open goes to session agent-a, generation 1.
func callOp(t *testing.T, c *client.Client, op string, payload any) *client.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := client.Command{Operation: op, Payload: payload}
	if op == "open" {
		g := int64(1)
		cmd.SessionID, cmd.Generation = "agent-a", &g
	}
	r, err := c.Call(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
