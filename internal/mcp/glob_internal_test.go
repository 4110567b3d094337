package mcp

import (
	"path"
	"slices"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"*.go", []string{"a.go", ".hidden.go"}, []string{"a/b.go", "a.gox", "go"}},
		{"**/*.go", []string{"a.go", "a/b.go", "a/b/c/d.go"}, []string{"a/b.md", "a.go/x"}},
		{"src/**", []string{"src", "src/a", "src/a/b"}, []string{"srcx", "x/src"}},
		{"**/test/**/*_test.go", []string{"test/a_test.go", "x/test/y/z/a_test.go"}, []string{"test.go", "x/tests/a_test.go"}},
		{"*.{go,md}", []string{"a.go", "b.md"}, []string{"c.txt", "x/a.go"}},
		{"{cmd,internal/*}/main.go", []string{"cmd/main.go", "internal/x/main.go"}, []string{"internal/main.go"}},
		{"{a}", []string{"{a}"}, []string{"a"}},
		{"[!a]*", []string{"b", "bcd"}, []string{"a", "abc"}},
		{"[^a]?", []string{"bb"}, []string{"ab", "b"}},
		{`\*`, []string{"*"}, []string{"a"}},
		{"a/**/b/**/c", []string{"a/b/c", "a/x/b/y/z/c"}, []string{"a/c", "a/b/x"}},
		{"**/**/x", []string{"x", "a/x", "a/b/x"}, []string{"y"}},
	}
	for _, c := range cases {
		g, err := compileGlob(c.pattern)
		if err != nil {
			t.Fatalf("%s: %v", c.pattern, err)
		}
		for _, p := range c.yes {
			if !g.match(strings.Split(p, "/")) {
				t.Errorf("%s does not match %s", c.pattern, p)
			}
		}
		for _, p := range c.no {
			if g.match(strings.Split(p, "/")) {
				t.Errorf("%s matches %s", c.pattern, p)
			}
		}
	}
	ex, _ := compileExclude("node_modules")
	if !ex.match([]string{"a", "node_modules"}) || !ex.match([]string{"node_modules"}) || ex.match([]string{"node_modules2"}) {
		t.Error("an exclude without '/' does not match names at any depth")
	}
	ex, _ = compileExclude("a/b")
	if !ex.match([]string{"a", "b"}) || ex.match([]string{"x", "a", "b"}) {
		t.Error("an exclude with '/' does not match its relative path only")
	}
}

func TestGlobDescend(t *testing.T) {
	g, _ := compileGlob("src/*/x.go")
	for p, want := range map[string]bool{"src": true, "src/a": true, "lib": false, "src/a/b": false} {
		if got := g.descend(strings.Split(p, "/")); got != want {
			t.Errorf("descend %s = %v, want %v", p, got, want)
		}
	}
	g, _ = compileGlob("**/x")
	if !g.descend([]string{"a", "b", "c"}) {
		t.Error("** does not descend")
	}
}

func TestGlobSplitAndErrors(t *testing.T) {
	for p, want := range map[string][]string{
		"src/**/*.go":    {"src"},
		"a/b/c.txt":      {"a", "b"},
		"*.go":           {},
		"../*":           {".."},
		"/etc/*":         {"", "etc"},
		"{a,b}/x":        {},
		"{a/x,a/y}/z":    {"a"},
		"docs/{a,b}.md":  {"docs"},
		"./x/*":          {".", "x"},
		"a/../../secret": {"a", "..", ".."},
	} {
		g, err := compileGlob(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		prefix, _, err := g.split()
		if err != nil || !slices.Equal(prefix, want) {
			t.Errorf("split %s = %q, %v; want %q", p, prefix, err, want)
		}
	}
	for p, want := range map[string]error{
		"":                                errGlobEmpty,
		strings.Repeat("a", 1025):         errGlobLong,
		"[abc":                            errGlobBad,
		"a\\":                             errGlobBad,
		strings.Repeat("{a,b}", 7):        errGlobBraces,
		"*/../x":                          errGlobSegments,
		"src/":                            errGlobSegments,
		"**//x":                           errGlobSegments,
		"x/*/.":                           errGlobSegments,
		strings.Repeat("{a,b}", 6) + "/x": nil,
	} {
		g, err := compileGlob(p)
		if err == nil {
			_, _, err = g.split()
		}
		if err != want {
			t.Errorf("%.40s: %v, want %v", p, err, want)
		}
	}
}

// FuzzGlob holds the matcher to path.Match on patterns both accept (no "**" segment, no
// braces, no "[!"; no negated class against a name with a '/', which path.Match's class may
// match), and checks that no pattern panics or matches without descending.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"*.go", "a.go"}, {"a/*/c", "a/b/c"}, {"[a-c]?", "bz"}, {`\[x`, "[x"}, {"**/x", "a/x"}, {"{a,b}", "b"}, {"[/]", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		segs := strings.Split(name, "/")
		m := g.match(segs)
		if m && len(segs) > 1 && !g.descend(segs[:len(segs)-1]) {
			t.Fatalf("%q matches %q but does not descend into its directory", pattern, name)
		}
		if strings.Contains(pattern, "**") || strings.ContainsAny(pattern, "{") || strings.Contains(pattern, "[!") {
			return
		}
		if strings.Contains(pattern, "[^") && strings.Contains(name, "/") {
			// path.Match's negated class matches '/' ("[^0]" on "/"); a class of ours
			// never does, as no part of a pattern crosses a segment.
			return
		}
		want, err := path.Match(pattern, name)
		if err == nil && want != m {
			t.Fatalf("%q on %q: %v, path.Match %v", pattern, name, m, want)
		}
	})
}
