package transcript

import (
	"os"
	"testing"
)

// SetLimits lowers the limits for one test; zero keeps a limit. Tests using it must not run
// in parallel.
func SetLimits(t testing.TB, line int, file int64, entries int) {
	oldLine, oldFile, oldEntries := maxLineBytes, maxFileBytes, maxEntries
	t.Cleanup(func() { maxLineBytes, maxFileBytes, maxEntries = oldLine, oldFile, oldEntries })
	if line > 0 {
		maxLineBytes = line
	}
	if file > 0 {
		maxFileBytes = file
	}
	if entries > 0 {
		maxEntries = entries
	}
}

// SkipSync turns fsync into a no-op for one test. Tests using it must not run in parallel.
func SkipSync(t testing.TB) {
	old := fsync
	t.Cleanup(func() { fsync = old })
	fsync = func(*os.File) error { return nil }
}

// SetSync replaces fsync for one test. Tests using it must not run in parallel.
func SetSync(t testing.TB, f func(*os.File) error) {
	old := fsync
	t.Cleanup(func() { fsync = old })
	fsync = f
}
