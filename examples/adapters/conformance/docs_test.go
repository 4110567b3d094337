package conformance_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"github.com/airlockhq/airlock/internal/validate"
)

// The guides' complete programs are tested examples. In the Markdown, an HTML comment on the
// line before a fence marks one (renderers do not show it):
//
//	<!-- example {"file":"counter.py","validate":"capability","action":"bump","args":{"by":1}} -->
//
// and the test extracts the block and runs the validator it names on it. A block of a
// programming language that is only a piece of a program is marked <!-- fragment --> instead;
// an unmarked one fails the test, so that no complete program slips into a guide untested.

// docExample is the marker of one tested example; its members are the marker's JSON.
type docExample struct {
	// File is the name the block is saved under (the guide tells the reader to use it).
	File string `json:"file"`
	// Validate is the validator: "capability" (airlock validate capability -- INTERPRETER FILE)
	// or "tool-adapter" (INTERPRETER FILE GRANT.json, then airlock validate tool-adapter; see
	// runToolExample).
	Validate string `json:"validate"`
	// Action and Args are the known-valid invoke of a capability example.
	Action string          `json:"action,omitempty"`
	Args   json.RawMessage `json:"args,omitempty"`
	// Operations are the operations a tool-adapter example is granted.
	Operations []string `json:"operations,omitempty"`

	lang string // the fence's language
	code string // the block's text
	at   string // guide:line of the fence, for messages
}

var (
	fenceLine   = regexp.MustCompile("^(```+)\\s*([A-Za-z0-9_+-]*)")
	exampleLine = regexp.MustCompile(`^<!-- example (\{.*\}) -->$`)
)

// programLanguages are the fence languages whose blocks must be marked example or fragment.
var programLanguages = map[string]bool{
	"python": true, "py": true, "go": true, "javascript": true, "js": true, "node": true,
	"typescript": true, "ts": true, "ruby": true, "rb": true, "rust": true, "c": true,
}

// interpreters maps a fence language to the program that runs an example written in it.
var interpreters = map[string]string{"python": "python3", "py": "python3", "javascript": "node", "js": "node", "node": "node"}

// extractExamples returns the marked examples of one guide, and a problem for every unmarked
// block of a programming language, malformed marker or marker without its fence.
func extractExamples(name, text string) ([]docExample, []string) {
	var out []docExample
	var problems []string
	lines := strings.Split(text, "\n")
	var marker *docExample
	markerLine := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := exampleLine.FindStringSubmatch(line); m != nil {
			dec := json.NewDecoder(strings.NewReader(m[1]))
			dec.DisallowUnknownFields()
			var ex docExample
			if err := dec.Decode(&ex); err != nil || ex.File == "" || (ex.Validate != "capability" && ex.Validate != "tool-adapter") {
				problems = append(problems, fmt.Sprintf("%s:%d: malformed example marker (want file, and validate capability or tool-adapter): %v", name, i+1, err))
				continue
			}
			marker, markerLine = &ex, i+1
			continue
		}
		f := fenceLine.FindStringSubmatch(line)
		if f == nil {
			if marker != nil && strings.TrimSpace(line) != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: the example marker is not followed by a fence", name, markerLine))
				marker = nil
			}
			continue
		}
		fence, lang := f[1], strings.ToLower(f[2])
		start := i + 1
		end := start
		for end < len(lines) && !strings.HasPrefix(lines[end], fence) {
			end++
		}
		if end == len(lines) {
			problems = append(problems, fmt.Sprintf("%s:%d: a fence that is never closed", name, i+1))
			break
		}
		prev := ""
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) != "" {
				prev = strings.TrimSpace(lines[j])
				break
			}
		}
		switch {
		case marker != nil:
			marker.lang, marker.code, marker.at = lang, strings.Join(lines[start:end], "\n")+"\n", fmt.Sprintf("%s:%d", name, i+1)
			out = append(out, *marker)
			marker = nil
		case programLanguages[lang] && prev != "<!-- fragment -->":
			problems = append(problems, fmt.Sprintf("%s:%d: a %s block is neither a tested example (<!-- example {…} -->) nor marked <!-- fragment -->", name, i+1, lang))
		}
		i = end
	}
	if marker != nil {
		problems = append(problems, fmt.Sprintf("%s:%d: the example marker is not followed by a fence", name, markerLine))
	}
	return out, problems
}

// guides returns every guide under docs/ with its text.
func guides(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "docs", "*.md"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no guides found: %v", err)
	}
	out := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out["docs/"+filepath.Base(p)] = string(b)
	}
	return out
}

func TestExtractExamples(t *testing.T) {
	const text = "# Guide\n\n" +
		"<!-- example {\"file\":\"a.py\",\"validate\":\"capability\",\"action\":\"go\",\"args\":{\"n\":1}} -->\n```python\nprint(1)\n\n```\n\n" +
		"<!-- fragment -->\n\n```python\nx = 1\n```\n" +
		"```json\n{}\n```\n" +
		"```sh\nls\n```\n" +
		"```go\npackage main\n```\n" +
		"<!-- example {\"file\":\"b.py\",\"validate\":\"shell\"} -->\n" +
		"<!-- example {\"file\":\"c.py\",\"validate\":\"capability\"} -->\ntext\n" +
		"<!-- example {\"file\":\"d.py\",\"validate\":\"capability\",\"extra\":1} -->\n" +
		"````python\n```\nnested\n````\n"
	exs, problems := extractExamples("g.md", text)
	if len(exs) != 1 || exs[0].File != "a.py" || exs[0].code != "print(1)\n\n" || exs[0].lang != "python" || exs[0].Action != "go" ||
		string(exs[0].Args) != `{"n":1}` || exs[0].at != "g.md:4" {
		t.Errorf("examples %+v", exs)
	}
	want := []string{
		"g.md:20: a go block is neither",
		"g.md:23: malformed example marker",
		"g.md:24: the example marker is not followed by a fence",
		"g.md:26: malformed example marker",
		"g.md:27: a python block is neither",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems %q, want %d", problems, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d %q, want prefix %q", i, problems[i], w)
		}
	}
}

// TestGuideExamples runs the validator on every complete program in the guides.
func TestGuideExamples(t *testing.T) {
	var all []docExample
	for name, text := range guides(t) {
		exs, problems := extractExamples(name, text)
		for _, p := range problems {
			t.Error(p)
		}
		all = append(all, exs...)
	}
	if len(all) == 0 {
		t.Fatal("no tested example in the guides")
	}
	seen := map[string]bool{}
	for _, ex := range all {
		if seen[ex.File] {
			t.Errorf("%s: a second example named %s", ex.at, ex.File)
		}
		seen[ex.File] = true
		t.Run(ex.File, func(t *testing.T) {
			name, ok := interpreters[ex.lang]
			if !ok {
				t.Fatalf("%s: no interpreter for a %s example", ex.at, ex.lang)
			}
			interp := python3
			if name == "node" {
				interp = node
			}
			exe := interp(t)
			file := filepath.Join(t.TempDir(), ex.File)
			if err := os.WriteFile(file, []byte(ex.code), 0o700); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s %s", ex.at, exe, file)
			switch ex.Validate {
			case "capability":
				conform(t, validate.Config{Command: exe, Args: []string{file}, Action: ex.Action, ActionArgs: ex.Args})
			case "tool-adapter":
				runToolExample(t, ex, exe, file)
			}
		})
	}
}

// runToolExample runs a tool-adapter example as its guide says: the operator writes
// {"root", "descriptor"} to a grant file, starts INTERPRETER FILE GRANT, and validates the
// descriptor with the root as --scratch. The harness runs twice against the one process (its
// idempotency memory belongs to the grant), then the adapter must exit on SIGTERM and remove
// its socket.
func runToolExample(t *testing.T, ex docExample, exe, file string) {
	dir := daemontest.ShortDir(t)
	run, root := filepath.Join(dir, "run"), filepath.Join(dir, "root")
	for _, d := range []string{run, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	handle := make([]byte, 32)
	rand.Read(handle)
	desc, err := json.Marshal(map[string]any{
		"protocolVersion": "1.0", "adapterId": "guide-example", "adapterVersion": "0.1.0",
		"endpoint": map[string]any{"transport": "unix", "path": filepath.Join(run, "fs.sock")},
		"binding": map[string]any{"hostInstanceId": "validate", "sessionId": "validate", "generation": 1,
			"capabilityHandle": base64.RawURLEncoding.EncodeToString(handle)},
		"operations": ex.Operations,
		"limits": map[string]any{"maxRequestBytes": 65536, "maxResponseBytes": 65536, "maxConcurrentRequests": 4,
			"maxQueuedRequests": 16, "requestTimeoutMs": 5000, "maxIdempotencyKeys": 256, "idempotencyTtlMs": 3600000},
	})
	if err != nil {
		t.Fatal(err)
	}
	grant := writeJSON(t, run, "grant.json", map[string]any{"root": root, "descriptor": json.RawMessage(desc)})

	var stderr daemontest.SyncBuffer
	cmd := exec.Command(exe, file, grant)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("adapter stderr:\n%s", stderr.String())
		}
	})
	socket := filepath.Join(run, "fs.sock")
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatal("the adapter exited before it listened")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the adapter did not listen within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), harnessTimeout)
		rep := validate.RunToolAdapter(ctx, validate.ToolConfig{Descriptor: desc, Scratch: root})
		cancel()
		for _, p := range rep.Probes {
			t.Logf("run %d: %s", i+1, probeLine(p))
		}
		if !rep.Pass {
			t.Fatalf("run %d: the tool-adapter harness failed %d probe(s) of %s", i+1, rep.Failed, ex.at)
		}
		for _, op := range ex.Operations {
			if p, ok := rep.Probe(op); !ok || p.Skipped {
				t.Errorf("probe %s did not run: %+v", op, p)
			}
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		stopped = true
	case <-time.After(10 * time.Second):
		t.Fatal("the adapter ignored SIGTERM")
	}
	if !cmd.ProcessState.Success() {
		t.Errorf("the adapter exited with %v", cmd.ProcessState)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the adapter left its socket: %v", err)
	}
}

// probeLine renders one probe as the CLI prints it.
func probeLine(p validate.Probe) string {
	status := "PASS"
	switch {
	case !p.Pass:
		status = "FAIL"
	case p.Skipped:
		status = "SKIP"
	}
	return status + " " + p.Name + ": " + p.Detail
}
