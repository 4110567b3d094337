package proposal_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/proposal"
)

var (
	envRef     = regexp.MustCompile(`\$(\{|[A-Za-z_])`)
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// FuzzParse: Parse never panics; what it accepts passes Check again after a round trip,
// holds no argv that sets or refers to environment and no interpreter option before the
// script, and what it refuses is refused with a proposal code.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"name":"light","command":"python3","args":["light.py"],"capabilities":["light"]}`))
	f.Add([]byte(`{"name":"a","command":"sh","args":["a.sh","API_KEY=x"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"env","args":["sh","a.sh"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"sh","args":["-c","id"],"capabilities":["x"]}`))
	f.Add([]byte(`{"name":"a","command":"bin/a","capabilities":["x"],"publish":{"room":"home","capabilities":[{"capabilityId":"x","actions":["on"],"observe":true}]}}`))
	f.Add([]byte(`{"name":"a","Name":"b"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := proposal.Parse(data)
		if err != nil {
			if proposal.CodeOf(err) == "" {
				t.Fatalf("a refusal without a code: %v", err)
			}
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := proposal.Parse(b)
		if err != nil {
			t.Fatalf("an accepted proposal does not parse again: %v\n%s", err, b)
		}
		if proposal.Interpreter(q.Command) && strings.HasPrefix(q.Args[0], "-") {
			t.Fatalf("an interpreter option before the script: %q", q.Args)
		}
		for i, a := range append([]string{q.Command}, q.Args...) {
			if envRef.MatchString(a) || (i > 0 && assignment.MatchString(a)) {
				t.Fatalf("environment in the argv accepted: %q", a)
			}
		}
	})
}

// FuzzResolve: whatever the command and arguments, a plan Resolve accepts runs only files of
// the workspace reached without the link in it (an interpreter on PATH is the one executable
// outside), and passes no absolute path outside the workspace.
func FuzzResolve(f *testing.F) {
	ws := f.TempDir()
	outside := f.TempDir()
	for name, body := range map[string]string{"a.py": "print(1)\n", "sub/b.sh": "echo\n"} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o700); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "x.py"), []byte("print(2)\n"), 0o700); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		f.Fatal(err)
	}
	root, err := filepath.EvalSymlinks(ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("python3", "a.py", "")
	f.Add("sh", "link/x.py", "")
	f.Add("sub/b.sh", "a.py", "/etc/passwd")
	f.Add("sh", "./sub/../a.py", "link")
	f.Add("./sub/b.sh", "sub//b.sh", root+"/a.py")
	f.Fuzz(func(t *testing.T, command, arg0, arg1 string) {
		p := &proposal.Proposal{Name: "a", Command: command, Capabilities: []string{"x"}}
		for _, a := range []string{arg0, arg1} {
			if a != "" {
				p.Args = append(p.Args, a)
			}
		}
		plan, err := proposal.Resolve(p, ws)
		if err != nil {
			if proposal.CodeOf(err) == "" {
				t.Fatalf("a refusal without a code: %v", err)
			}
			return
		}
		inside := func(path string) bool {
			return strings.HasPrefix(path, root+"/") && !strings.HasPrefix(path, root+"/link")
		}
		for i, file := range plan.Files {
			if i == 0 && proposal.Interpreter(command) {
				continue
			}
			if !inside(file.Path) {
				t.Fatalf("a pinned file outside the workspace: %+v (%q %q)", file, command, p.Args)
			}
		}
		for _, a := range plan.Args {
			if strings.HasPrefix(a, "/") && !inside(a) && a != root {
				t.Fatalf("an absolute argument outside the workspace: %q (%q %q)", a, command, p.Args)
			}
		}
	})
}
