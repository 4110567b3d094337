package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestSocket(t *testing.T) {
	t.Setenv(EnvSocket, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := Socket(); got != "/run/user/1000/airlock/airlockd.sock" {
		t.Errorf("with XDG_RUNTIME_DIR: %s", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "relative/dir") // not absolute: ignored
	want := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d", os.Geteuid()), "airlockd.sock")
	if got := Socket(); got != want {
		t.Errorf("without a usable XDG_RUNTIME_DIR: %s, want %s", got, want)
	}
	t.Setenv(EnvSocket, "/tmp/x.sock")
	if got := Socket(); got != "/tmp/x.sock" {
		t.Errorf("with %s: %s", EnvSocket, got)
	}
}

func TestStateDir(t *testing.T) {
	t.Setenv(EnvStateDir, "")
	t.Setenv("XDG_STATE_HOME", "/home/u/.state")
	if got, err := StateDir(); err != nil || got != "/home/u/.state/airlock" {
		t.Errorf("with XDG_STATE_HOME: %s %v", got, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got, err := StateDir(); err != nil || got != "/home/u/.local/state/airlock" {
		t.Errorf("from HOME: %s %v", got, err)
	}
	t.Setenv("HOME", "")
	if _, err := StateDir(); err == nil {
		t.Error("no HOME and no overrides: want an error")
	}
	t.Setenv(EnvStateDir, "/srv/airlock")
	if got, err := StateDir(); err != nil || got != "/srv/airlock" {
		t.Errorf("with %s: %s %v", EnvStateDir, got, err)
	}
}
