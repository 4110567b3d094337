package paths

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestSocket(t *testing.T) {
	userRuntime(t, "")
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

// userRuntime points the login manager's runtime base at a temporary directory and, unless
// mode is "", makes this user's directory in it with that mode.
func userRuntime(t *testing.T, mode string) string {
	t.Helper()
	base := t.TempDir()
	old := userRuntimeBase
	userRuntimeBase = base
	t.Cleanup(func() { userRuntimeBase = old })
	d := filepath.Join(base, strconv.Itoa(os.Geteuid()))
	if mode != "" {
		m, err := strconv.ParseUint(mode, 8, 32)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, os.FileMode(m)); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestRuntimeDirWithoutXDG: a launcher that drops XDG_RUNTIME_DIR (as MCP clients do) still
// finds the login manager's directory when it is the user's own and closed; otherwise /tmp.
func TestRuntimeDirWithoutXDG(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	tmp := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d", os.Geteuid()))
	for _, tc := range []struct {
		mode string
		user bool
	}{
		{"700", true},
		{"755", false}, // others may enter: not a runtime directory a login manager made
		{"710", false},
		{"", false}, // no such directory
	} {
		d := userRuntime(t, tc.mode)
		want := tmp
		if tc.user {
			want = filepath.Join(d, "airlock")
		}
		if got := RuntimeDir(); got != want {
			t.Errorf("mode %q: %s, want %s", tc.mode, got, want)
		}
		if got := Socket(); got != filepath.Join(want, "airlockd.sock") {
			t.Errorf("mode %q: socket %s", tc.mode, got)
		}
	}
	// XDG_RUNTIME_DIR, when set, wins over the login manager's directory.
	userRuntime(t, "700")
	t.Setenv("XDG_RUNTIME_DIR", "/run/elsewhere")
	if got := RuntimeDir(); got != "/run/elsewhere/airlock" {
		t.Errorf("with XDG_RUNTIME_DIR: %s", got)
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
