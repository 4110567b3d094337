package hint_test

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/hint"
)

var update = flag.Bool("update", false, "rewrite docs/mcp.md's hint table from the code")

// doorSources are the packages whose error codes a call can end with at a door: an MCP tool
// result (the daemon's answer to invokeTool, observeCapability, invokeCapability or a room
// call, or the bridge's own) or the tool output a model reads in an agent turn (the tool
// client's, the adapter's, a room call's, the turn's own). Every Code* string constant of
// their non-test files is such a code, except in the files of skipFiles.
var doorSources = []string{
	"protocol",               // every daemon answer's envelope, sessions, recovery
	"tooladapter",            // the daemon's tool-adapter client and path walk
	"tooladapter/toolclient", // the same, as a turn calls it
	"fsadapter/fsops",        // airlock-fs's refusals, passed on as codes
	"fsadapter/server",       // airlock-fs's result frames
	"capadapter",             // capability calls
	"capadapter/capclient",   // the supervisor that runs them
	"room",                   // room calls
	"roomhost",               // the daemon's side of rooms
	"turn",                   // unknown_tool
	"mcp",                    // daemon_unreachable
	"daemon",                 // fs_adapter_unavailable (an open with a grant airlockd mints)
	"gate",                   // policy_denied, approval_required, record_failed, approval_*
	"approval",               // the approval queue: unknown_approval, not_rememberable
	"proposal",               // an agent's adapter proposal, refused
	"policy",                 // invalid_policy: airlock mcp --dir --policy, reopened after a restart
}

// skipFiles hold codes that no call can end with. airlock-fs's admin socket
// (fsadapter/server/admin.go) is not one of them: airlockd mints the grant of an airlock mcp
// --dir session there and passes a refusal on (root_invalid when DIR is gone), and when the
// bridge cannot reopen the session it answers every call with that refusal.
var skipFiles = map[string]string{
	"roomhost/fabric.go":   "starting the daemon with a fabric file",
	"roomhost/localbus.go": "admitting another daemon to the embedded bus (admitBusHost, removeBusHost), which neither door calls",
	"daemon/web.go":        "the operator's login to the web page (roomUILogin), which neither door calls",
}

var codeName = regexp.MustCompile(`^Code[A-Z]`)

// doorCodes reads the codes from the source of doorSources. A Code* constant defined as
// another one (daemon's CodeInvalidPolicy = policy.CodeInvalidPolicy) is resolved among the
// constants the scan read, and fails the test when it names one the scan did not read: its
// code reaches a door, so the package that defines it belongs in doorSources.
func doorCodes(t *testing.T) map[string]string {
	t.Helper()
	codes := map[string]string{}  // code → where it is defined
	consts := map[string]string{} // package.Name → code, for the constants defined as another
	type alias struct{ name, of, where string }
	var aliases []alias
	fset := token.NewFileSet()
	for _, dir := range doorSources {
		files, err := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in internal/%s (%v)", dir, err)
		}
		for _, f := range files {
			rel := dir + "/" + filepath.Base(f)
			if strings.HasSuffix(f, "_test.go") || skipFiles[rel] != "" {
				continue
			}
			af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, s := range gd.Specs {
					vs := s.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if !codeName.MatchString(n.Name) || i >= len(vs.Values) {
							continue
						}
						name, where := af.Name.Name+"."+n.Name, rel+": "+n.Name
						switch v := vs.Values[i].(type) {
						case *ast.BasicLit:
							if v.Kind != token.STRING {
								continue
							}
							code, err := strconv.Unquote(v.Value)
							if err != nil {
								t.Fatal(err)
							}
							codes[code], consts[name] = where, code
						case *ast.Ident: // another constant of the package
							aliases = append(aliases, alias{name, af.Name.Name + "." + v.Name, where})
						case *ast.SelectorExpr: // a constant of an imported package
							if x, ok := v.X.(*ast.Ident); ok {
								aliases = append(aliases, alias{name, importedName(af, x.Name) + "." + v.Sel.Name, where})
							}
						}
					}
				}
			}
		}
	}
	for len(aliases) > 0 {
		var left []alias
		for _, a := range aliases {
			if code, ok := consts[a.of]; ok {
				consts[a.name] = code
				if codes[code] == "" {
					codes[code] = a.where
				}
			} else {
				left = append(left, a)
			}
		}
		if len(left) == len(aliases) {
			for _, a := range left {
				t.Errorf("%s is %s, which the scan does not read: add its package to doorSources", a.where, a.of)
			}
			break
		}
		aliases = left
	}
	return codes
}

// importedName returns the package name that local, an import's name in af, stands for: the
// last element of its path unless the import renames it.
func importedName(af *ast.File, local string) string {
	for _, im := range af.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		base := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil && im.Name.Name == local || im.Name == nil && base == local {
			return base
		}
	}
	return local
}

// TestEveryDoorCodeHasAHint: every code a door can answer with, as the source defines it, has
// a hint, and the table holds no code that is defined nowhere (a code renamed or removed).
func TestEveryDoorCodeHasAHint(t *testing.T) {
	codes := doorCodes(t)
	if len(codes) < 100 {
		t.Fatalf("found only %d codes: is doorSources right?", len(codes))
	}
	for _, known := range []string{"file_exists", "edit_not_found", "not_utf8", "invalid_args", "result_withheld", "approval_denied", "unknown_tool", "daemon_unreachable", "adapter_request_invalid", "root_invalid", "invalid_policy"} {
		if codes[known] == "" {
			t.Errorf("the source scan missed %s", known)
		}
	}
	for c, where := range codes {
		if _, ok := hint.Lookup(c); !ok {
			t.Errorf("%s (%s) has no hint in internal/hint", c, where)
		}
	}
	for _, c := range hint.Codes() {
		if codes[c] == "" {
			t.Errorf("the hint table holds %s, which no door source defines", c)
		}
	}
}

// TestHintsAreSentences holds each hint to the form the doors show: one sentence that ends
// with a full stop, says what to do after a colon, and is short enough to read.
func TestHintsAreSentences(t *testing.T) {
	for _, r := range hint.Rows() {
		h := r.Hint
		if !strings.HasSuffix(h, ".") || strings.Count(h, ". ") > 0 || !strings.Contains(h, ": ") ||
			utf8.RuneCountInString(h) > 300 || strings.ContainsAny(h, "\n\t|") {
			t.Errorf("%v: %q is not one short sentence with a colon", r.Codes, h)
		}
	}
	if hint.For("no_such_code_anywhere") != hint.Fallback {
		t.Error("an unknown code does not get the fallback")
	}
	if h, _ := hint.Lookup("file_exists"); hint.For("file_exists") != h || !strings.Contains(h, "overwrite true") {
		t.Errorf("file_exists: %q", h)
	}
}

const (
	docPath   = "../../docs/mcp.md"
	beginMark = "<!-- hints:begin (generated by go test ./internal/hint -update) -->"
	endMark   = "<!-- hints:end -->"
)

// docTable renders the table for docs/mcp.md: one row per distinct hint, in the table's
// order, with every code that has it.
func docTable() string {
	var order []string
	codes := map[string][]string{}
	for _, r := range hint.Rows() {
		if _, ok := codes[r.Hint]; !ok {
			order = append(order, r.Hint)
		}
		codes[r.Hint] = append(codes[r.Hint], r.Codes...)
	}
	var sb strings.Builder
	sb.WriteString("| code | what to do next |\n|---|---|\n")
	for _, h := range order {
		cs := codes[h]
		quoted := make([]string, len(cs))
		for i, c := range cs {
			quoted[i] = "`" + c + "`"
		}
		sb.WriteString("| " + strings.Join(quoted, ", ") + " | " + strings.ReplaceAll(h, "|", `\|`) + " |\n")
	}
	sb.WriteString("| any other code | " + hint.Fallback + " |\n")
	return sb.String()
}

// TestHintsDocumented: docs/mcp.md lists exactly the table, every code and its hint, between
// its markers; -update rewrites it.
func TestHintsDocumented(t *testing.T) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, beginMark), strings.Index(doc, endMark)
	if i < 0 || j < i {
		t.Fatalf("docs/mcp.md lacks the markers %q … %q", beginMark, endMark)
	}
	want := docTable()
	got := doc[i+len(beginMark)+1 : j]
	if got == want {
		for _, c := range hint.Codes() {
			if !strings.Contains(got, "`"+c+"`") {
				t.Errorf("docs/mcp.md's table lacks %s", c)
			}
		}
		return
	}
	if *update {
		doc = doc[:i+len(beginMark)+1] + want + doc[j:]
		if err := os.WriteFile(docPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	for k := range max(len(gl), len(wl)) {
		var g, w string
		if k < len(gl) {
			g = gl[k]
		}
		if k < len(wl) {
			w = wl[k]
		}
		if g != w {
			t.Fatalf("docs/mcp.md's hint table differs from internal/hint at row %d (go test ./internal/hint -update rewrites it):\n got %s\nwant %s", k, g, w)
		}
	}
}
