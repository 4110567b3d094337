package mcp

import (
	"errors"
	"path"
	"strings"
)

// The file-name patterns of fs_find and of the exclude lists of fs_find and fs_tree. They are
// matched against paths that the walk found through fs.list, never resolved against the
// filesystem: a pattern selects among names the daemon has already confined, and the only
// part of a pattern that becomes a path is fs_find's literal start (globPrefix), which the
// daemon then checks like any other path.
//
// Syntax, by segment (the pattern is split at '/'):
//
//   - "**" alone matches any number of segments, none included;
//   - otherwise path.Match's: '*' any run of characters, '?' one character, "[abc]", "[a-z]",
//     "[^a]" (or "[!a]") a class, '\' quotes the next character; none matches '/';
//   - "{a,b}" (nesting allowed) expands to one pattern per alternative before the split, as in
//     a shell, so "*.{go,md}" and "{cmd,internal}/**" work; a brace without a top-level comma
//     is literal.
//
// A name beginning with '.' is matched like any other (no special case for dot files).

const (
	// maxGlobBytes bounds a pattern, maxGlobAlternatives its brace expansion and
	// maxGlobPatterns an exclude list.
	maxGlobBytes        = 1024
	maxGlobAlternatives = 64
	maxGlobPatterns     = 32
)

// glob is a compiled pattern: its brace alternatives, each split into segments.
type glob struct {
	alts [][]string
}

var (
	errGlobEmpty    = errors.New("is empty")
	errGlobLong     = errors.New("is longer than 1024 bytes")
	errGlobBraces   = errors.New("expands to more than 64 alternatives")
	errGlobBad      = errors.New("is malformed (an unclosed '[' or a trailing '\\')")
	errGlobSegments = errors.New(`has an empty, "." or ".." segment after a wildcard`)
)

// compileGlob compiles a pattern. Every segment must be a valid path.Match pattern.
func compileGlob(p string) (*glob, error) {
	switch {
	case p == "":
		return nil, errGlobEmpty
	case len(p) > maxGlobBytes:
		return nil, errGlobLong
	}
	alts, err := expandBraces(p)
	if err != nil {
		return nil, err
	}
	g := &glob{}
	for _, a := range alts {
		segs := strings.Split(a, "/")
		for i, s := range segs {
			s = bangClass(s)
			if _, err := path.Match(s, ""); err != nil {
				return nil, errGlobBad
			}
			segs[i] = s
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// compileExclude compiles an exclude pattern: one without '/' matches an entry's name at any
// depth (as in .gitignore: "node_modules", "*.log"), one with '/' its whole relative path.
func compileExclude(p string) (*glob, error) {
	g, err := compileGlob(p)
	if err != nil {
		return nil, err
	}
	for i, a := range g.alts {
		if len(a) == 1 {
			g.alts[i] = []string{"**", a[0]}
		}
	}
	return g, nil
}

// expandBraces expands the first top-level "{…,…}" of p, recursively.
func expandBraces(p string) ([]string, error) {
	out := []string{}
	var expand func(string) error
	expand = func(s string) error {
		open, close, commas := findBraces(s)
		if open < 0 {
			if len(out) == maxGlobAlternatives {
				return errGlobBraces
			}
			out = append(out, s)
			return nil
		}
		prefix, suffix := s[:open], s[close+1:]
		from := open + 1
		for _, c := range append(commas, close) {
			if err := expand(prefix + s[from:c] + suffix); err != nil {
				return err
			}
			from = c + 1
		}
		return nil
	}
	if err := expand(p); err != nil {
		return nil, err
	}
	return out, nil
}

// findBraces finds the first '{' that has a matching '}' and a comma at its own level, and
// returns their byte offsets; open is -1 when there is none. A '\' quotes the next byte.
func findBraces(s string) (open, close int, commas []int) {
	for start := 0; start < len(s); start++ {
		if s[start] == '\\' {
			start++
			continue
		}
		if s[start] != '{' {
			continue
		}
		depth := 0
		commas = commas[:0]
		for i := start; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '{':
				depth++
			case ',':
				if depth == 1 {
					commas = append(commas, i)
				}
			case '}':
				depth--
				if depth == 0 {
					if len(commas) > 0 {
						return start, i, commas
					}
					i = len(s) // "{a}" is literal: try the next '{'
				}
			}
		}
	}
	return -1, -1, nil
}

// bangClass rewrites a class's leading '!' as '^', path.Match's negation.
func bangClass(s string) string {
	if !strings.Contains(s, "[!") {
		return s
	}
	b := []byte(s)
	in := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\\':
			i++
		case !in && b[i] == '[':
			in = true
			if i+1 < len(b) && b[i+1] == '!' {
				b[i+1] = '^'
			}
		case in && b[i] == ']':
			in = false
		}
	}
	return string(b)
}

// isLiteral reports whether a segment matches only itself.
func isLiteral(seg string) bool { return !strings.ContainsAny(seg, `*?[\`) }

// split returns the pattern's literal start (the leading segments, common to every
// alternative, that are literal and not the last of any alternative) and the alternatives
// that remain after it. fs_find walks from the literal start, which the daemon checks as a
// path; what remains is matched against names, which are never "", "." or "..", so a
// remaining segment of that kind is refused rather than left to match nothing.
func (g *glob) split() (prefix []string, rest *glob, err error) {
	n := 0
	for ; ; n++ {
		ok := true
		for _, a := range g.alts {
			if n >= len(a)-1 || !isLiteral(a[n]) || a[n] != g.alts[0][n] {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
	}
	rest = &glob{}
	for _, a := range g.alts {
		for _, s := range a[n:] {
			if s == "" || s == "." || s == ".." {
				return nil, nil, errGlobSegments
			}
		}
		rest.alts = append(rest.alts, a[n:])
	}
	return g.alts[0][:n], rest, nil
}

// match reports whether the segments of a relative path match some alternative.
func (g *glob) match(segs []string) bool {
	for _, a := range g.alts {
		if st := run(a, segs); st[len(a)] {
			return true
		}
	}
	return false
}

// descend reports whether some path beneath the directory segs could match: whether a walk
// must list it.
func (g *glob) descend(segs []string) bool {
	for _, a := range g.alts {
		st := run(a, segs)
		for i := range len(a) {
			if st[i] {
				return true
			}
		}
	}
	return false
}

// run matches segs against the pattern a as a set of states (st[i]: a[:i] matched so far),
// in time proportional to len(a)·len(segs), whatever the number of "**".
func run(a, segs []string) []bool {
	st := make([]bool, len(a)+1)
	st[0] = true
	closure(a, st)
	next := make([]bool, len(a)+1)
	for _, name := range segs {
		clear(next)
		live := false
		for i, on := range st[:len(a)] {
			if !on {
				continue
			}
			if a[i] == "**" {
				next[i] = true
				live = true
			} else if ok, _ := path.Match(a[i], name); ok {
				next[i+1] = true
				live = true
			}
		}
		st, next = next, st
		if !live {
			return st
		}
		closure(a, st)
	}
	return st
}

// closure lets every "**" match no segment.
func closure(a []string, st []bool) {
	for i, s := range a {
		if st[i] && s == "**" {
			st[i+1] = true
		}
	}
}
