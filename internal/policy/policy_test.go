package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExampleFilePasses(t *testing.T) {
	p, err := ReadFile(writeFile(t, mustRead(t, "testdata/example.json"), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if f := p.Check(); len(f) != 0 {
		t.Fatalf("examples failed: %+v", f)
	}
	if p.Name() != "src-only" {
		t.Fatalf("name %q", p.Name())
	}
}

func TestDecide(t *testing.T) {
	p, err := Parse(mustRead(t, "testdata/example.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, op, path string
		want           Decision
		rule           int
	}{
		{"dotenv at the root", OpRead, ".env", Deny, 0},
		{"dotenv deep", OpSearch, "a/b/.env.prod", Deny, 0},
		{"dotenv is not a prefix match", OpRead, "x.env", Allow, 1},
		{"read elsewhere", OpRead, "docs/a.md", Allow, 1},
		{"write under src", OpWrite, "src/x/y.go", Allow, 2},
		{"src itself", OpWrite, "./src", Allow, 2},
		{"cleaned path", OpWrite, "a/../src/z", Allow, 2},
		{"write elsewhere", OpWrite, "srcx/y.go", Ask, -1},
		{"list the cwd", OpList, ".", Allow, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := p.DecideFS(tc.op, tc.path)
			if v.Decision != tc.want || v.Rule != tc.rule {
				t.Fatalf("DecideFS(%s, %q) = %+v, want %s by rule %d", tc.op, tc.path, v, tc.want, tc.rule)
			}
		})
	}
	if v := p.DecideAction("lamp", "observe"); v.Decision != Allow || v.Rule != 4 {
		t.Fatalf("lamp observe: %+v", v)
	}
	if v := p.DecideAction("thermostat", "set"); v.Decision != Ask || v.Rule != -1 || v.Reason() != "the policy's default" {
		t.Fatalf("default: %+v", v)
	}
	if got := p.Summary(OpWrite); got != "allow or ask by path" {
		t.Fatalf("summary write %q", got)
	}
	if got := p.Summary(OpList); got != "allow" {
		t.Fatalf("summary list %q", got)
	}
	if !p.UsesPaths(OpWrite) || p.UsesPaths(OpList) {
		t.Fatal("UsesPaths")
	}
}

func TestCheckReportsAFailingExample(t *testing.T) {
	p, err := Parse([]byte(`{"default":"allow","rules":[{"operations":["fs.write"],"decision":"deny"}],
		"examples":[{"operation":"fs.write","path":"a","expect":"allow"},{"operation":"fs.read","path":"a","expect":"allow"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := p.Check()
	if len(f) != 1 || f[0].Index != 0 || f[0].Got.Decision != Deny || f[0].Got.Rule != 0 {
		t.Fatalf("failures %+v", f)
	}
}

func TestParseRefusesWithTheField(t *testing.T) {
	for _, tc := range []struct{ name, doc, field string }{
		{"unknown key", `{"default":"allow","colour":1}`, "colour"},
		{"unknown rule key", `{"default":"allow","rules":[{"operations":["fs.read"],"decision":"deny","path":["x"]}]}`, "rules[0].path"},
		{"case variant key", `{"Default":"allow"}`, "Default"},
		{"duplicate key", `{"default":"allow","default":"deny"}`, "default"},
		{"missing default", `{}`, "default"},
		{"bad decision", `{"default":"maybe"}`, "default"},
		{"bad rule decision", `{"default":"allow","rules":[{"operations":["fs.read"],"decision":"yes"}]}`, "rules[0].decision"},
		{"unknown op", `{"default":"allow","rules":[{"operations":["fs.delete"],"decision":"deny"}]}`, "rules[0].operations[0]"},
		{"bad glob", `{"default":"allow","rules":[{"operations":["fs.read"],"paths":["a/[b"],"decision":"deny"}]}`, "rules[0].paths[0]"},
		{"absolute glob", `{"default":"allow","rules":[{"operations":["fs.read"],"paths":["/etc/*"],"decision":"deny"}]}`, "rules[0].paths[0]"},
		{"dotdot glob", `{"default":"allow","rules":[{"operations":["fs.read"],"paths":["../x"],"decision":"deny"}]}`, "rules[0].paths[0]"},
		{"partial doublestar", `{"default":"allow","rules":[{"operations":["fs.read"],"paths":["a**"],"decision":"deny"}]}`, "rules[0].paths[0]"},
		{"mixed rule", `{"default":"allow","rules":[{"operations":["fs.read"],"capability":"x","decision":"deny"}]}`, "rules[0]"},
		{"empty rule", `{"default":"allow","rules":[{"decision":"deny"}]}`, "rules[0]"},
		{"paths on capability", `{"default":"allow","rules":[{"capability":"x","paths":["a"],"decision":"deny"}]}`, "rules[0].paths"},
		{"actions on fs", `{"default":"allow","rules":[{"operations":["fs.read"],"actions":["a"],"decision":"deny"}]}`, "rules[0].actions"},
		{"bad example", `{"default":"allow","examples":[{"operation":"fs.read","expect":"sure"}]}`, "examples[0].expect"},
		{"example without target", `{"default":"allow","examples":[{"expect":"allow"}]}`, "examples[0]"},
		{"proposals ask", `{"default":"allow","proposals":"ask"}`, "proposals"},
		{"proposals other", `{"default":"allow","proposals":"yes"}`, "proposals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse = %v, want *Error", err)
			}
			if pe.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", pe.Field, tc.field, err)
			}
		})
	}
}

func TestReadFileRefusesAFileOthersMayWrite(t *testing.T) {
	name := writeFile(t, []byte(`{"default":"allow"}`), 0o600)
	if err := os.Chmod(name, 0o620); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(name); err == nil || !strings.Contains(err.Error(), "writable by its group") {
		t.Fatalf("ReadFile = %v", err)
	}
	if _, err := ReadFile(filepath.Dir(name)); err == nil {
		t.Fatal("a directory was read as a policy")
	}
}

func TestNamed(t *testing.T) {
	for _, n := range Names() {
		if _, ok := Named(n); !ok {
			t.Fatal(n)
		}
	}
	ro, _ := Named("read-only")
	if ro.DecideFS(OpWrite, "a").Decision != Deny || ro.DecideFS(OpRead, "a").Decision != Allow {
		t.Fatal("read-only")
	}
	if _, ok := Named("nope"); ok {
		t.Fatal("unknown name")
	}
	if !AllowAll().Trivial() || ro.Trivial() {
		t.Fatal("Trivial")
	}
	if Stricter(Allow, Ask) != Ask || Stricter(Deny, Ask) != Deny || Stricter(Allow, Allow) != Allow {
		t.Fatal("Stricter")
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, b []byte, mode os.FileMode) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "policy.json")
	if err := os.WriteFile(name, b, mode); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestProposalsSwitch: proposals are off unless the document says "proposals": "allow".
func TestProposalsSwitch(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"default":"allow"}`:                    false,
		`{"default":"allow","proposals":"deny"}`: false,
		`{"default":"deny","proposals":"allow"}`: true,
	} {
		p, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if p.AllowsProposals() != want {
			t.Fatalf("%s: AllowsProposals %v", doc, !want)
		}
	}
	var none *Policy
	if none.AllowsProposals() || AllowAll().AllowsProposals() {
		t.Fatal("no policy, or allow-all, allows proposals")
	}
}

// A FIFO named as the policy is refused at once: opening it used to wait for a writer,
// forever, on the goroutine of the session open that named it.
func TestReadFileRefusesAFIFO(t *testing.T) {
	name := filepath.Join(t.TempDir(), "policy.fifo")
	if err := syscall.Mkfifo(name, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadFile(name)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadFile = %v", err)
		}
	case <-time.After(10 * time.Second):
		// Let the blocked open return, so that the goroutine ends.
		if w, err := os.OpenFile(name, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("ReadFile blocked on a FIFO")
	}
}
