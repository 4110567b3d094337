// Package fsadapter_test holds the import rule of airlock-fs, the adapter server: it speaks the
// tool-adapter wire (package tooladapter) and imports no client code, so that what it shares
// with the daemon is exactly the wire.
package fsadapter_test

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/airlockhq/airlock"

// clientCode reports why pkg is client code the server must not import, or "".
func clientCode(pkg string) string {
	switch {
	case strings.HasPrefix(pkg, module+"/internal/tooladapter/"):
		return "the daemon's side of the tool-adapter protocol (the wire is internal/tooladapter itself)"
	case strings.HasPrefix(pkg, module+"/internal/capadapter/"):
		return "the runtime of capability adapters"
	case pkg == module+"/internal/client", pkg == module+"/internal/daemon", pkg == module+"/internal/session":
		return "the daemon and its clients"
	case strings.Contains(path.Base(pkg), "client"):
		return "a client package"
	}
	return ""
}

// TestServerImportsNoClient lists, with go list, every package that the adapter server's
// packages and its command import, directly or not, and fails on any client package.
func TestServerImportsNoClient(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not installed")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "./internal/fsadapter/...", "./cmd/airlock-fs")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	seen := false
	for _, pkg := range deps {
		if pkg == module+"/internal/tooladapter" {
			seen = true
		}
		if why := clientCode(pkg); why != "" {
			t.Errorf("the adapter server depends on %s: %s", pkg, why)
		}
	}
	if !seen {
		t.Errorf("the adapter server does not import the wire, internal/tooladapter: is the list right?\n%s", out)
	}
	for _, pkg := range []string{module + "/internal/tooladapter/toolclient", module + "/internal/client", module + "/internal/capadapter/capclient", module + "/internal/daemon"} {
		if clientCode(pkg) == "" {
			t.Errorf("clientCode(%s) does not refuse it", pkg)
		}
	}
}
