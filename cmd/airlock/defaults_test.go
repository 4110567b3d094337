package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// TestDefaultsProbeReady is the README's promise: airlockd started with no path flags (as
// `make run` does) listens where airlock looks by default, and airlock probe exits 0.
func TestDefaultsProbeReady(t *testing.T) {
	root := daemontest.ShortDir(t)
	runtimeDir := filepath.Join(root, "xdg-run")
	stateHome := filepath.Join(root, "xdg-state")
	os.Mkdir(runtimeDir, 0o700)
	t.Setenv("AIRLOCK_SOCKET", "")
	t.Setenv("AIRLOCK_STATE_DIR", "")
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	t.Setenv("XDG_STATE_HOME", stateHome)
	d := daemontest.Start(t, daemontest.Options{
		Defaults: true,
		Socket:   filepath.Join(runtimeDir, "airlock", "airlockd.sock"),
		StateDir: filepath.Join(stateHome, "airlock"),
	})
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"probe"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("probe exit %d\nstdout %s\nstderr %s\ndaemon:\n%s", code, &stdout, &stderr, d.Stderr())
	}
	if _, err := os.Stat(filepath.Join(stateHome, "airlock", "airlock.db")); err != nil {
		t.Fatalf("default state directory not used: %v", err)
	}
}
