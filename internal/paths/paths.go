// Package paths computes airlock's default socket and state locations.
package paths

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Environment variables that override the defaults.
const (
	EnvSocket   = "AIRLOCK_SOCKET"
	EnvStateDir = "AIRLOCK_STATE_DIR"
)

// Socket returns the owner socket path: $AIRLOCK_SOCKET, else
// $XDG_RUNTIME_DIR/airlock/airlockd.sock, else /tmp/airlock-$UID/airlockd.sock.
func Socket() string {
	if p := os.Getenv(EnvSocket); p != "" {
		return p
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "airlock", "airlockd.sock")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d", os.Geteuid()), "airlockd.sock")
}

// StateDir returns the state directory: $AIRLOCK_STATE_DIR, else $XDG_STATE_HOME/airlock, else
// ~/.local/state/airlock.
func StateDir() (string, error) {
	if p := os.Getenv(EnvStateDir); p != "" {
		return p, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "airlock"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("no state directory: set --state-dir, AIRLOCK_STATE_DIR, XDG_STATE_HOME or HOME")
	}
	return filepath.Join(home, ".local", "state", "airlock"), nil
}
