package policy

import (
	"errors"
	"path"
	"strings"
)

// glob is a parsed path glob: segments matched with path.Match, "**" matching any number of
// segments (zero included).
type glob []string

const doubleStar = "**"

// errBadGlob is a glob Parse refuses; the message says why.
var errBadGlob = errors.New("bad glob")

// maxGlobLen bounds one glob, as the adapter protocol bounds a path.
const maxGlobLen = 4096

// parseGlob checks a glob: relative, no empty, "." or ".." segments, every segment a valid
// path.Match pattern, "**" only as a whole segment.
func parseGlob(s string) (glob, error) {
	if s == "" || len(s) > maxGlobLen {
		return nil, errors.New("must be 1 to 4096 bytes")
	}
	if strings.HasPrefix(s, "/") {
		return nil, errors.New("must be relative to the session's working directory (no leading /)")
	}
	segs := strings.Split(s, "/")
	for _, seg := range segs {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return nil, errors.New("has an empty, \".\" or \"..\" segment")
		case seg == doubleStar:
			continue
		case strings.Contains(seg, doubleStar):
			return nil, errors.New(`"**" must be a whole segment`)
		case strings.ContainsAny(seg, "\\\x00"):
			return nil, errors.New("has a backslash or NUL")
		}
		if _, err := path.Match(seg, ""); err != nil {
			return nil, errBadGlob
		}
	}
	return glob(segs), nil
}

// splitPath cleans a call's path into segments; "." and "" are the working directory itself
// (no segments).
func splitPath(p string) []string {
	p = path.Clean("/" + p)
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

func anyGlob(gs []glob, segs []string) bool {
	for _, g := range gs {
		if g.match(segs) {
			return true
		}
	}
	return false
}

// match reports whether the segments match g. The recursion on "**" is bounded by the
// number of segments times the number of "**": a policy and a path are both bounded.
func (g glob) match(segs []string) bool {
	if len(g) == 0 {
		return len(segs) == 0
	}
	if g[0] == doubleStar {
		// Collapse runs of "**".
		rest := g[1:]
		for len(rest) > 0 && rest[0] == doubleStar {
			rest = rest[1:]
		}
		for i := 0; i <= len(segs); i++ {
			if rest.match(segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, err := path.Match(g[0], segs[0])
	return err == nil && ok && g[1:].match(segs[1:])
}

// Glob is a path glob as a policy rule's paths spell it ("src/**", "*.md"), for another
// package that matches paths the same way (the approval queue's remembered decisions).
type Glob struct{ g glob }

// ParseGlob checks a glob as a rule's paths are checked: relative, no empty, "." or ".."
// segments, "**" only as a whole segment.
func ParseGlob(s string) (Glob, error) {
	g, err := parseGlob(s)
	if err != nil {
		return Glob{}, err
	}
	return Glob{g}, nil
}

// Match reports whether path (relative to the session's working directory) matches g.
func (g Glob) Match(path string) bool { return g.g != nil && g.g.match(splitPath(path)) }
