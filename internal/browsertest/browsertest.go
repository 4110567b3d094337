// Package browsertest holds what the tests that drive a page in headless Chromium share:
// finding the browser (a failure under CI=true, a skip elsewhere), where screenshots go, and
// the check that no browser process outlives its test. It is imported by tests only.
package browsertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Chromium finds Debian's chromium (or another Chromium build). Under CI=true a missing
// browser fails the test: .ci/run installs it.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (apt-get install chromium); CI needs it")
	}
	t.Skip("chromium is not installed; install Debian's chromium to run the browser test")
	return ""
}

// ArtifactDir is where screenshots go: $AIRLOCK_ARTIFACTS, or the test's temp dir.
func ArtifactDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("AIRLOCK_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// ProcessesWith lists the pids whose command line mentions s (a browser's profile directory,
// say), so that a test can assert none is left.
func ProcessesWith(s string) []string {
	var pids []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if d.Name()[0] < '0' || d.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), s) {
			pids = append(pids, d.Name())
		}
	}
	return pids
}
