//go:build linux

package fsops

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// crashChildEnv makes the test binary a child that rewrites a file through Write forever.
const crashChildEnv = "FSOPS_CRASH_CHILD_DIR"

const crashFileBytes = 1 << 20

func crashContents() [2]string {
	return [2]string{strings.Repeat("A", crashFileBytes), strings.Repeat("b", crashFileBytes/2) + strings.Repeat("B", crashFileBytes/2+7)}
}

// crashChild alternates the two contents of "target" until it is killed.
func crashChild(dir string) {
	r, err := Open(dir)
	if err != nil {
		os.Exit(3)
	}
	c := crashContents()
	for i := 0; ; i++ {
		if _, perr := r.Write(bg, WritePayload{Path: "target", Content: c[i%2], Overwrite: ptr(true)}); perr != nil {
			os.Exit(4)
		}
		if i == 0 {
			os.WriteFile(filepath.Join(dir, "started"), nil, 0o644)
		}
	}
}

// TestCrashSafety SIGKILLs a child at random moments while it replaces a file through Write:
// afterwards the file holds one whole content or the other, never a torn mix.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns children")
	}
	exe, err := os.Executable()
	mustDo(t, err)
	dir := t.TempDir()
	c := crashContents()
	mustDo(t, os.WriteFile(filepath.Join(dir, "target"), []byte(c[0]), 0o644))
	for iter := range 12 {
		os.Remove(filepath.Join(dir, "started"))
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		mustDo(t, cmd.Start())
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("child did not start")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(40_000)) * time.Microsecond)
		mustDo(t, cmd.Process.Kill())
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
			t.Fatalf("iteration %d: child ended with %v, not by the kill", iter, err)
		}
		got := readFile(t, filepath.Join(dir, "target"))
		if got != c[0] && got != c[1] {
			t.Fatalf("iteration %d: torn file of %d bytes", iter, len(got))
		}
	}
	temps, _ := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	t.Logf("%d temporary files left by killed writers (documented)", len(temps))
}
