package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// The README's shell blocks are a walkthrough that must run, in order, in one shell on a
// fresh machine. TestREADME extracts them (as examples/adapters/conformance's
// TestGuideExamples does the guides' programs) and runs them so: one bash, the binaries the
// Makefile's build target names built by the test, a private HOME, XDG_RUNTIME_DIR,
// XDG_STATE_HOME and TMPDIR, and at the end every background job the README started stopped
// with SIGTERM and waited for.
//
// Two conventions in the README, both visible to a reader:
//
//   - <!-- readme-test: skip (REASON) --> on the line before a fence: a block a test cannot
//     run (one that stays in the foreground, or needs a model server). The reason is required.
//   - A command line ending in "# refused: CODE …": the command must fail, and its stderr must
//     name CODE (the daemon's machine code in "airlock: CODE: message").
//
// `make build` is the one command the shell does not run: the test built its binaries already
// (with -race when the tests run with it) and put them in ./bin, where the README expects them.

var (
	readmeSkip    = regexp.MustCompile(`^<!-- readme-test: skip \((.+)\) -->$`)
	readmeMarker  = regexp.MustCompile(`^<!-- readme-test`)
	readmeRefused = regexp.MustCompile(`^(.*\S)\s+# refused: ([a-z_]+)\b.*$`)
)

// shellLanguages are the fence languages of shell blocks.
var shellLanguages = map[string]bool{"sh": true, "bash": true, "shell": true}

// readmeBlock is one shell block of the README.
type readmeBlock struct {
	line  int      // 1-based line of the block's first code line
	lines []string // the block's code
	skip  string   // the skip marker's reason, or ""
}

// extractREADME returns the README's shell blocks in order, and a problem for every malformed
// marker, marker without its shell fence, unclosed fence and refused line that is not one
// whole command.
func extractREADME(text string) ([]readmeBlock, []string) {
	var out []readmeBlock
	var problems []string
	lines := strings.Split(text, "\n")
	skip, skipLine := "", 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if readmeMarker.MatchString(line) {
			m := readmeSkip.FindStringSubmatch(line)
			if m == nil || strings.TrimSpace(m[1]) == "" {
				problems = append(problems, fmt.Sprintf("README.md:%d: malformed marker (want <!-- readme-test: skip (REASON) -->)", i+1))
				continue
			}
			skip, skipLine = m[1], i+1
			continue
		}
		f := fenceLine.FindStringSubmatch(line)
		if f == nil {
			if skip != "" && strings.TrimSpace(line) != "" {
				problems = append(problems, fmt.Sprintf("README.md:%d: the skip marker is not followed by a fence", skipLine))
				skip = ""
			}
			continue
		}
		fence, lang := f[1], strings.ToLower(f[2])
		end := i + 1
		for end < len(lines) && !strings.HasPrefix(lines[end], fence) {
			end++
		}
		if end == len(lines) {
			problems = append(problems, fmt.Sprintf("README.md:%d: a fence that is never closed", i+1))
			break
		}
		switch {
		case shellLanguages[lang]:
			b := readmeBlock{line: i + 2, lines: lines[i+1 : end], skip: skip}
			for j, l := range b.lines {
				if readmeRefused.MatchString(l) && j > 0 && continued(b.lines[j-1]) {
					problems = append(problems, fmt.Sprintf("README.md:%d: a refused line must be one whole command", b.line+j))
				}
			}
			out = append(out, b)
		case skip != "":
			problems = append(problems, fmt.Sprintf("README.md:%d: the skip marker is not followed by a shell fence", skipLine))
		}
		skip = ""
		i = end
	}
	if skip != "" {
		problems = append(problems, fmt.Sprintf("README.md:%d: the skip marker is not followed by a fence", skipLine))
	}
	return out, problems
}

var fenceLine = regexp.MustCompile("^(```+)\\s*([A-Za-z0-9_+-]*)")

// continued reports whether a shell line goes on to the next one.
func continued(line string) bool {
	l := strings.TrimRight(line, " \t")
	return strings.HasSuffix(l, "\\") || strings.HasSuffix(l, "|") || strings.HasSuffix(l, "&&") || strings.HasSuffix(l, "||")
}

// readmeScript renders the runnable blocks as one script, README.md.sh, whose line numbers are
// the README's, so that bash's $LINENO names the README line that failed. Every other line is
// empty; a refused line becomes a check on the same line.
func readmeScript(total int, blocks []readmeBlock) string {
	out := make([]string, total)
	for _, b := range blocks {
		if b.skip != "" {
			continue
		}
		for j, l := range b.lines {
			n := b.line + j
			if m := readmeRefused.FindStringSubmatch(l); m != nil {
				l = fmt.Sprintf(`if { %s ; } 2>"$README_ERR"; then echo "README.md:%d: succeeded, but the README says it is refused (%s)" >&2; exit 1; fi; `+
					`cat "$README_ERR" >&2; grep -q '%s' "$README_ERR" || { echo "README.md:%d: refused without %s" >&2; exit 1; }`,
					m[1], n, m[2], m[2], n, m[2])
			}
			out[n-1] = l
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// readmeHarness runs the script: strict options, a trace of every command with its README line
// (shown when the test fails), the failing README line on error, the test's `make build`, and
// at exit every background job stopped (SIGTERM) and waited for.
const readmeHarness = `set -E -euo pipefail
PS4='+ ${BASH_SOURCE[0]:-harness}:$LINENO: '; set -x
trap 'echo "${BASH_SOURCE[0]:-harness}:$LINENO: exit status $?" >&2' ERR
trap 'st=$?; kill $(jobs -p) 2>/dev/null || true; wait || true; exit $st' EXIT
make() {
	if [ "$*" = build ]; then echo "make build: built by the test into ./bin" >&2; return 0; fi
	echo "make $*: not something the README test runs" >&2; return 1
}
source ./README.md.sh
echo "README: every block ran" >&2
`

// readmeTimeout bounds the whole walkthrough; it takes seconds, and only a hang (a wait loop
// whose condition never comes true) reaches it.
const readmeTimeout = 3 * time.Minute

func TestExtractREADME(t *testing.T) {
	const text = "# R\n\n" +
		"<!-- readme-test: skip (foreground) -->\n```sh\nmake run\n```\n" +
		"```sh\necho a\nfalse   # refused: some_code because\n```\n" +
		"```json\n{}\n```\n" +
		"<!-- readme-test: skip () -->\n" +
		"<!-- readme-test: skip (x) -->\ntext\n" +
		"<!-- readme-test: skip (y) -->\n```json\n{}\n```\n" +
		"```sh\nls |\n  wc -l  # refused: x\n```\n" +
		"```sh\nnever closed\n"
	blocks, problems := extractREADME(text)
	if len(blocks) != 3 || blocks[0].skip != "foreground" || blocks[0].line != 5 || blocks[1].skip != "" ||
		blocks[1].line != 8 || strings.Join(blocks[1].lines, "|") != "echo a|false   # refused: some_code because" {
		t.Errorf("blocks %+v", blocks)
	}
	want := []string{
		"README.md:14: malformed marker",
		"README.md:15: the skip marker is not followed by a fence",
		"README.md:17: the skip marker is not followed by a shell fence",
		"README.md:23: a refused line must be one whole command",
		"README.md:25: a fence that is never closed",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d", problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d %q, want prefix %q", i, problems[i], w)
		}
	}
	script := strings.Split(readmeScript(len(strings.Split(text, "\n")), blocks[:2]), "\n")
	if script[4] != "" || script[7] != "echo a" || !strings.HasPrefix(script[8], `if { false ; } 2>"$README_ERR"; then echo "README.md:9: succeeded`) ||
		!strings.Contains(script[8], `grep -q 'some_code'`) {
		t.Errorf("script lines 5, 8, 9: %q %q %q", script[4], script[7], script[8])
	}
}

// TestREADME runs the README's walkthroughs in order, as a newcomer on a fresh machine would.
func TestREADME(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary of make build and starts three daemons")
	}
	text, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, problems := extractREADME(string(text))
	for _, p := range problems {
		t.Error(p)
	}
	runnable := 0
	for _, b := range blocks {
		if b.skip == "" {
			runnable++
		} else {
			t.Logf("README.md:%d: skipped: %s", b.line, b.skip)
		}
	}
	if runnable == 0 || t.Failed() {
		t.Fatalf("%d runnable blocks", runnable)
	}

	root := daemontest.ShortDir(t)
	bin := filepath.Join(root, "bin")
	for _, d := range []string{"bin", "home", "run", "state", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, pkg := range makeBuildPackages(t) {
		exe := daemontest.Build(t, pkg)
		if err := os.Symlink(exe, filepath.Join(bin, filepath.Base(exe))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "README.md.sh"), []byte(readmeScript(len(strings.Split(string(text), "\n")), blocks)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), readmeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", readmeHarness)
	cmd.Dir = root
	cmd.Env = append(readmeEnv(),
		"HOME="+filepath.Join(root, "home"), "XDG_RUNTIME_DIR="+filepath.Join(root, "run"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"), "TMPDIR="+filepath.Join(root, "tmp"),
		"README_ERR="+filepath.Join(root, "refused.err"))
	// Its own process group, so that a hang kills every process the README started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out daemontest.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("the README ran in %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("the README failed: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "README: every block ran") {
		t.Fatalf("the README did not run to its end:\n%s", out.String())
	}
	// The background jobs were stopped: nothing is left in the group, and the daemon removed
	// its socket.
	if err := syscall.Kill(-cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("processes the README started are still running after its end (kill: %v)", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "run", "airlock", "airlockd.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the README's daemon left its socket: %v", err)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out.String())
	}
}

// makeBuildPackages returns the packages of the Makefile's build target, ./cmd/... expanded,
// so that the test builds what `make build` would.
func makeBuildPackages(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^build:\n\t\$\(GO\) build -o \$\(BIN\)/ (.+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Makefile has no build target of the form $(GO) build -o $(BIN)/ PACKAGES")
	}
	var pkgs []string
	for _, p := range strings.Fields(string(m[1])) {
		if !strings.HasSuffix(p, "/...") {
			pkgs = append(pkgs, p)
			continue
		}
		dirs, err := filepath.Glob(filepath.Join("..", "..", strings.TrimSuffix(p, "/..."), "*", "main.go"))
		if err != nil || len(dirs) == 0 {
			t.Fatalf("%s: no main packages (%v)", p, err)
		}
		for _, d := range dirs {
			pkgs = append(pkgs, strings.TrimSuffix(p, "...")+filepath.Base(filepath.Dir(d)))
		}
	}
	return pkgs
}

// readmeEnv is the test's environment without what would point the README's commands at
// another daemon or home.
func readmeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "AIRLOCK_"), strings.HasPrefix(name, "XDG_"), name == "HOME", name == "TMPDIR", name == "GORACE":
			continue
		}
		env = append(env, kv)
	}
	// The race runtime sleeps a second before a program exits (ThreadSanitizer's
	// atexit_sleep_ms), once for each of the README's forty-odd commands; scripts/race.sh
	// shortens it for make test, and so does this for a plain go test -race.
	g := os.Getenv("GORACE")
	if !strings.Contains(g, "atexit_sleep_ms") {
		g = strings.TrimSpace("atexit_sleep_ms=50 " + g)
	}
	return append(env, "GORACE="+g)
}
