// Package paths computes airlock's default socket and state locations.
package paths

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Environment variables that override the defaults.
const (
	EnvSocket   = "AIRLOCK_SOCKET"
	EnvStateDir = "AIRLOCK_STATE_DIR"
)

// Socket returns the owner socket path: $AIRLOCK_SOCKET, else airlockd.sock in RuntimeDir.
func Socket() string {
	if p := os.Getenv(EnvSocket); p != "" {
		return p
	}
	return filepath.Join(RuntimeDir(), "airlockd.sock")
}

// userRuntimeBase is where login managers (systemd-logind, elogind) make each user's runtime
// directory, named by the uid.
var userRuntimeBase = "/run/user"

// RuntimeDir returns the directory of airlock's default sockets: $XDG_RUNTIME_DIR/airlock;
// else, when the variable is missing but the login manager made the user's runtime directory
// (/run/user/$UID, owned by the user and closed to everyone else), /run/user/$UID/airlock;
// else /tmp/airlock-$UID. The second case is common: MCP clients and other launchers start
// their servers with a reduced environment, and without it `airlock mcp` would look for a
// daemon started from a login shell in the wrong place.
func RuntimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "airlock")
	}
	uid := os.Geteuid()
	d := filepath.Join(userRuntimeBase, strconv.Itoa(uid))
	if fi, err := os.Stat(d); err == nil && fi.IsDir() && fi.Mode().Perm()&0o077 == 0 {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
			return filepath.Join(d, "airlock")
		}
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("airlock-%d", uid))
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
