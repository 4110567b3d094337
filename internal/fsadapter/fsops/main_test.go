//go:build linux

package fsops

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/protocol"
	"go.uber.org/goleak"
)

// TestMain runs the crash child when asked to; otherwise the tests, then checks for leaked
// goroutines and, on a full run, that the tests provoked every error code.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir) // never returns
	}
	code := m.Run()
	if flag.Lookup("test.fuzz").Value.String() != "" {
		// A fuzzing coordinator or worker: the engine's own goroutines outlive m.Run, and a
		// worker that lingers in a leak check stalls the run.
		os.Exit(code)
	}
	if code == 0 && flag.Lookup("test.run").Value.String() == "" {
		var missing []string
		seenMu.Lock()
		for _, c := range Codes {
			if !seen[c] {
				missing = append(missing, c)
			}
		}
		seenMu.Unlock()
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "error codes no test provoked: %v\n", missing)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// seen records the codes that tests asserted.
var (
	seenMu sync.Mutex
	seen   = map[string]bool{}
)

func sawCode(code string) {
	seenMu.Lock()
	seen[code] = true
	seenMu.Unlock()
}

var bg = context.Background()

func ptr[T any](v T) *T { return &v }

// makeTree creates files under dir from a spec: "d/" a directory, "f" an empty file,
// "f=content" a file with content, "l -> target" a symbolic link.
func makeTree(t testing.TB, dir string, spec ...string) {
	t.Helper()
	for _, s := range spec {
		switch {
		case strings.Contains(s, " -> "):
			name, target, _ := strings.Cut(s, " -> ")
			mustDo(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			mustDo(t, os.Symlink(target, filepath.Join(dir, name)))
		case strings.HasSuffix(s, "/"):
			mustDo(t, os.MkdirAll(filepath.Join(dir, s), 0o755))
		default:
			name, content, _ := strings.Cut(s, "=")
			mustDo(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755))
			mustDo(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
		}
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openRoot(t testing.TB, dir string) *Root {
	t.Helper()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// wantCode fails unless perr has the code.
func wantCode(t testing.TB, perr *protocol.Error, code string) {
	t.Helper()
	if perr == nil {
		t.Fatalf("got success, want %s", code)
	}
	if perr.Code != code {
		t.Fatalf("got %v, want %s", perr, code)
	}
	sawCode(code)
}

func noErr(t testing.TB, perr *protocol.Error) {
	t.Helper()
	if perr != nil {
		t.Fatalf("unexpected error: %v (details %v)", perr, perr.Details)
	}
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
