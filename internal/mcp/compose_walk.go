package mcp

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// fs_tree, fs_find and fs_list_sorted: listings composed of fs.list calls. A walk goes
// breadth first, listing the directories of one level a few at a time (c.parallel at once),
// so that when a bound stops it, what it returns is the top of the tree, never one deep
// corner of it; the entries are then sorted in tree order (each directory followed by what
// it holds, names in byte order). fs.list reports regular files and directories only, so a
// walk never follows a symbolic link.

const (
	maxWalkDepth     = 64 // fs.search's own depth bound in airlock-fs
	defaultWalkLimit = 1000
	// maxFindScan and maxFindDirs bound fs_find's walk: the entries it looks at and the
	// directories it lists.
	maxFindScan = 100_000
	maxFindDirs = 10_000
)

// walkEntry is one entry a walk found. Path is root-relative (what the other tools take).
type walkEntry struct {
	Path       string `json:"path"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt,omitempty"`
	// NotListed marks a directory at fs_tree's maxDepth, whose entries were not asked for.
	NotListed bool `json:"notListed,omitempty"`
	// Error is the code of a directory's fs.list that failed; the walk went on without it.
	Error string `json:"error,omitempty"`

	segs []string // relative to the walk's start
}

// walkOptions configure a walk.
type walkOptions struct {
	start    string   // the directory to walk, root-relative; the daemon checks it
	base     []string // segments from the tool's path argument to start, for excludes
	exclude  []*glob
	maxDepth int // list directories above this depth (start's entries are at depth 1)
	// depthTruncates: a directory left unlisted at maxDepth makes the walk truncated
	// (fs_find) rather than marked NotListed (fs_tree).
	depthTruncates bool
	maxResults     int
	want           func(e *walkEntry) bool // whether e is a result
	descend        func(e *walkEntry) bool // whether to list directory e
	listMax        func(results int) int64 // maxEntries of the next fs.list
	maxScan        int                     // entries looked at, 0 for no bound but maxResults
	maxDirs        int                     // directories listed, 0 likewise
	progress       string                  // what a result is, for progress messages
}

// overfull is a directory with more entries than one fs.list holds (tooladapter's
// MaxListEntries, or the grant's response frame): only the first ones by name were looked at.
type overfull struct {
	path   string
	listed int // the entries its listing held
}

// cut is the text's last line for a walk that overfull left incomplete: no argument of the
// tool reaches the entries a listing does not hold, so the line says so rather than to raise
// a bound (TestWalkOfAnOverfullDirectory).
func (o *overfull) cut() string {
	return "(truncated: " + o.path + " has more entries than one listing holds: only its first " + strconv.Itoa(o.listed) +
		" by name were looked at, and no argument of this tool reaches the others)\n"
}

// walk walks from opts.start and returns the results in tree order, whether a bound left
// some out, and, when only a listing's own bound did, the first directory whose listing could
// not hold all its entries. A failure to list the start is the call's error; a subdirectory
// that fails is marked with its code.
func (c *composedCall) walk(opts walkOptions) ([]*walkEntry, bool, *overfull, *protocol.Error) {
	type dir struct {
		path  string
		segs  []string
		depth int
		entry *walkEntry // nil for the start
	}
	var (
		results         []*walkEntry
		truncated       bool
		full            *overfull
		ownCut          bool // a bound of the tool's left results out
		scanned, listed int
		textUsed        int64
		level           = []dir{{path: opts.start}}
		chunk           = 2 * c.parallel
		finish          = func(cut bool) ([]*walkEntry, bool, *overfull, *protocol.Error) {
			slices.SortFunc(results, func(a, b *walkEntry) int { return slices.Compare(a.segs, b.segs) })
			if cut || ownCut {
				full = nil // raising a bound does show more
			}
			return results, truncated || cut, full, nil
		}
	)
	for len(level) > 0 {
		var next []dir
		for lo := 0; lo < len(level); lo += chunk {
			if opts.maxDirs > 0 && listed >= opts.maxDirs {
				return finish(true)
			}
			part := level[lo:min(lo+chunk, len(level))]
			lists := make([]*listResult, len(part))
			errs := make([]*protocol.Error, len(part))
			maxEntries := opts.listMax(len(results))
			c.all(len(part), func(i int) { lists[i], errs[i] = c.list(part[i].path, maxEntries) })
			if c.ctx.Err() != nil {
				return nil, false, nil, errCancelled
			}
			listed += len(part)
			for i, d := range part {
				if errs[i] != nil {
					if d.entry == nil {
						return nil, false, nil, errs[i]
					}
					d.entry.Error = errs[i].Code
					continue
				}
				truncated = truncated || lists[i].Truncated
				if n := len(lists[i].Entries); lists[i].Truncated {
					switch {
					case maxEntries < tooladapter.MaxListEntries && int64(n) == maxEntries:
						ownCut = true // the tool asked for no more
					case full == nil:
						full = &overfull{path: d.path + "/", listed: n}
						if d.path == "." {
							full.path = "the granted directory"
						}
					}
				}
				for _, le := range lists[i].Entries {
					scanned++
					segs := append(slices.Clip(d.segs), le.Name)
					if excluded(opts.exclude, opts.base, segs) {
						continue
					}
					e := &walkEntry{Path: joinPath(d.path, le.Name), Type: le.Type, Size: le.Size, ModifiedAt: le.ModifiedAt, segs: segs}
					if opts.want(e) {
						cost := int64(len(e.Path) + 2)
						if len(results) == opts.maxResults || textUsed+cost > c.budget {
							return finish(true)
						}
						results = append(results, e)
						textUsed += cost
					}
					if le.Type == fsops.TypeDirectory && opts.descend(e) {
						if d.depth+1 < opts.maxDepth {
							next = append(next, dir{path: e.Path, segs: segs, depth: d.depth + 1, entry: e})
						} else if opts.depthTruncates {
							truncated, ownCut = true, true
						} else {
							e.NotListed = true
						}
					}
					if opts.maxScan > 0 && scanned >= opts.maxScan {
						return finish(true)
					}
				}
			}
			c.step(len(part), strconv.Itoa(listed)+" directories listed, "+strconv.Itoa(len(results))+" "+opts.progress)
		}
		level = next
	}
	return finish(false)
}

// excluded reports whether an exclude pattern matches base+segs.
func excluded(ex []*glob, base, segs []string) bool {
	if len(ex) == 0 {
		return false
	}
	rel := append(slices.Clip(base), segs...)
	for _, g := range ex {
		if g.match(rel) {
			return true
		}
	}
	return false
}

// walkText renders a walk's entries, a line each: the path, a directory's ending in "/".
func walkText(entries []*walkEntry, truncated bool, empty, cut string) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.Path)
		if e.Type == fsops.TypeDirectory {
			b.WriteByte('/')
		}
		if e.NotListed {
			b.WriteString(" (not listed: maxDepth)")
		}
		if e.Error != "" {
			b.WriteString(" (not listed: " + e.Error + ")")
		}
		b.WriteByte('\n')
	}
	switch {
	case truncated:
		b.WriteString(cut)
	case len(entries) == 0:
		b.WriteString(empty)
	}
	return b.String()
}

var excludeProp = schema{
	"type": "array", "maxItems": maxGlobPatterns,
	"description": `Glob patterns to leave out (with what is beneath them): one without "/" matches a name at any depth ("node_modules", "*.log"), one with "/" a path relative to path.`,
	"items":       schema{"type": "string", "minLength": 1, "maxLength": maxGlobBytes},
}

// walkOut is the output schema of fs_tree and fs_find.
func walkOut(list string) schema {
	return closedObject([]string{list, "truncated"}, schema{
		list: schema{"type": "array", "items": closedObject([]string{"path", "type", "size"}, schema{
			"path": schema{"type": "string"}, "type": entryTypeProp, "size": sizeProp, "modifiedAt": modifiedAtProp,
			"notListed": schema{"type": "boolean", "description": "A directory at maxDepth, not listed."},
			"error":     schema{"type": "string", "description": "The code of this directory's listing, which failed."},
		})},
		"truncated": schema{"type": "boolean"},
	})
}

func treeTool(tooladapter.Limits) *sdk.Tool {
	return readOnlyTool("tree",
		"List a directory of the granted directory and everything beneath it, a path per entry. When a bound stops it, the top of the tree is what is listed.",
		closedObject([]string{"path"}, schema{
			"path":       pathProp,
			"maxDepth":   intProp("List this many levels (default and most: 64).", 1, maxWalkDepth),
			"maxEntries": intProp("At most this many entries (default 1000).", 1, tooladapter.MaxListEntries),
			"exclude":    excludeProp,
		}),
		walkOut("entries"))
}

// walkArgs are fs_tree's and fs_find's arguments.
type walkArgs struct {
	Path       *string   `json:"path"`
	Pattern    *string   `json:"pattern"`
	MaxDepth   *int64    `json:"maxDepth"`
	MaxEntries *int64    `json:"maxEntries"`
	MaxResults *int64    `json:"maxResults"`
	Exclude    *[]string `json:"exclude"`
}

func compileExcludes(list *[]string) ([]*glob, *protocol.Error) {
	if list == nil {
		return nil, nil
	}
	if len(*list) > maxGlobPatterns {
		return nil, argError("exclude", "at most "+strconv.Itoa(maxGlobPatterns)+" patterns")
	}
	var out []*glob
	for _, p := range *list {
		g, err := compileExclude(p)
		if err != nil {
			return nil, argFault("exclude", "argument exclude: the pattern %q %s", p, err.Error())
		}
		out = append(out, g)
	}
	return out, nil
}

var walkMust = map[string]string{
	"path":       pathMust,
	"pattern":    `a glob pattern such as "*.go" or "src/**/*_test.go"`,
	"maxDepth":   "an integer from 1 to 64",
	"maxEntries": "an integer from 1 to 10000",
	"maxResults": "an integer from 1 to 10000",
	"exclude":    "an array of at most 32 glob patterns",
}

func runTree(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	var a walkArgs
	if perr := decodeArgs(args, &a, walkMust, "path"); perr != nil {
		return nil, perr
	}
	if a.Pattern != nil || a.MaxResults != nil {
		field := "pattern"
		if a.Pattern == nil {
			field = "maxResults"
		}
		return nil, argFault(field, "%s is not an argument of this tool", field)
	}
	depth, perr := intArg("maxDepth", a.MaxDepth, maxWalkDepth, 1, maxWalkDepth)
	if perr != nil {
		return nil, perr
	}
	limit, perr := intArg("maxEntries", a.MaxEntries, defaultWalkLimit, 1, tooladapter.MaxListEntries)
	if perr != nil {
		return nil, perr
	}
	ex, perr := compileExcludes(a.Exclude)
	if perr != nil {
		return nil, perr
	}
	entries, truncated, full, perr := c.walk(walkOptions{
		start: *a.Path, exclude: ex, maxDepth: int(depth), maxResults: int(limit),
		want:     func(*walkEntry) bool { return true },
		descend:  func(*walkEntry) bool { return true },
		listMax:  func(n int) int64 { return min(limit-int64(n)+1, tooladapter.MaxListEntries) },
		progress: "entries",
	})
	if perr != nil {
		return nil, perr
	}
	res := struct {
		Entries   []*walkEntry `json:"entries"`
		Truncated bool         `json:"truncated"`
	}{nonNil(entries), truncated}
	cut := "(truncated: there are more entries; raise maxEntries, lower maxDepth, exclude some, or list a subdirectory)\n"
	if full != nil {
		cut = full.cut()
	}
	return composedResult(res, walkText(entries, truncated, "(empty directory)\n", cut)), nil
}

func findTool(tooladapter.Limits) *sdk.Tool {
	return readOnlyTool("find",
		`Find files and directories by name beneath a directory of the granted directory: a glob pattern matched against paths relative to path ("*.go" at the top, "**/*.go" at any depth, "{src,test}/**/*.ts"). Returns their paths.`,
		closedObject([]string{"path", "pattern"}, schema{
			"path":       pathProp,
			"pattern":    schema{"type": "string", "minLength": 1, "maxLength": maxGlobBytes, "description": `"*", "?" and "[a-z]" match within a name, "**" any number of directories, "{a,b}" either.`},
			"maxResults": intProp("At most this many matches (default 1000).", 1, tooladapter.MaxListEntries),
			"exclude":    excludeProp,
		}),
		walkOut("matches"))
}

func runFind(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	var a walkArgs
	if perr := decodeArgs(args, &a, walkMust, "path", "pattern"); perr != nil {
		return nil, perr
	}
	if a.MaxDepth != nil || a.MaxEntries != nil {
		field := "maxDepth"
		if a.MaxDepth == nil {
			field = "maxEntries"
		}
		return nil, argFault(field, "%s is not an argument of this tool", field)
	}
	limit, perr := intArg("maxResults", a.MaxResults, defaultWalkLimit, 1, tooladapter.MaxListEntries)
	if perr != nil {
		return nil, perr
	}
	g, err := compileGlob(*a.Pattern)
	var prefix []string
	var rest *glob
	if err == nil {
		prefix, rest, err = g.split()
	}
	if err != nil {
		return nil, argFault("pattern", "argument pattern %s", err.Error())
	}
	ex, perr := compileExcludes(a.Exclude)
	if perr != nil {
		return nil, perr
	}
	// The pattern's literal start becomes the walk's start, as written but for "." segments
	// ("./src/*.go" is "src/*.go"): the daemon checks it as it checks any path, so "../x/*"
	// or "/etc/*" is its refusal, not a walk.
	prefix = slices.DeleteFunc(prefix, func(s string) bool { return s == "." })
	start := *a.Path
	if len(prefix) > 0 {
		start = joinPath(start, strings.Join(prefix, "/"))
	}
	matches, truncated, full, perr := c.walk(walkOptions{
		start: start, base: prefix, exclude: ex, maxDepth: maxWalkDepth, depthTruncates: true, maxResults: int(limit),
		want:    func(e *walkEntry) bool { return rest.match(e.segs) },
		descend: func(e *walkEntry) bool { return rest.descend(e.segs) },
		listMax: func(int) int64 { return tooladapter.MaxListEntries },
		maxScan: maxFindScan, maxDirs: maxFindDirs, progress: "matches",
	})
	if perr != nil {
		return nil, perr
	}
	res := struct {
		Matches   []*walkEntry `json:"matches"`
		Truncated bool         `json:"truncated"`
	}{nonNil(matches), truncated}
	cut := "(truncated: there may be more matches; raise maxResults, narrow the path or pattern, or exclude some directories)\n"
	if full != nil {
		cut = full.cut()
	}
	return composedResult(res, walkText(matches, truncated, "(no matches)\n", cut)), nil
}

func nonNil(e []*walkEntry) []*walkEntry {
	if e == nil {
		return []*walkEntry{}
	}
	return e
}

func listSortedTool(tooladapter.Limits) *sdk.Tool {
	return readOnlyTool("list sorted",
		"List a directory of the granted directory sorted by name, by size (largest first) or by modification time (newest first), with its totals.",
		closedObject([]string{"path", "sortBy"}, schema{
			"path":       pathProp,
			"sortBy":     schema{"enum": []any{"name", "size", "modified"}},
			"maxEntries": intProp("Return at most this many of the sorted entries (default 1000).", 1, tooladapter.MaxListEntries),
		}),
		closedObject([]string{"entries", "truncated", "files", "directories", "bytes"}, schema{
			"entries": schema{"type": "array", "items": closedObject([]string{"name", "type"}, schema{
				"name": schema{"type": "string"}, "type": entryTypeProp, "size": sizeProp, "modifiedAt": modifiedAtProp,
			})},
			"truncated":   schema{"type": "boolean", "description": "Entries were left out: by maxEntries, or the directory has more than one listing holds."},
			"files":       schema{"type": "integer", "minimum": 0, "description": "Files listed."},
			"directories": schema{"type": "integer", "minimum": 0, "description": "Directories listed."},
			"bytes":       schema{"type": "integer", "minimum": 0, "description": "Total size of the files listed."},
		}))
}

func runListSorted(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	var a struct {
		Path       *string `json:"path"`
		SortBy     *string `json:"sortBy"`
		MaxEntries *int64  `json:"maxEntries"`
	}
	must := map[string]string{"path": pathMust, "sortBy": `"name", "size" or "modified"`, "maxEntries": "an integer from 1 to 10000"}
	if perr := decodeArgs(args, &a, must, "path", "sortBy"); perr != nil {
		return nil, perr
	}
	by := *a.SortBy
	if by != "name" && by != "size" && by != "modified" {
		return nil, argError("sortBy", must["sortBy"])
	}
	limit, perr := intArg("maxEntries", a.MaxEntries, defaultWalkLimit, 1, tooladapter.MaxListEntries)
	if perr != nil {
		return nil, perr
	}
	l, perr := c.list(*a.Path, tooladapter.MaxListEntries)
	if perr != nil {
		return nil, perr
	}
	res := struct {
		Entries     []listEntry `json:"entries"`
		Truncated   bool        `json:"truncated"`
		Files       int         `json:"files"`
		Directories int         `json:"directories"`
		Bytes       int64       `json:"bytes"`
	}{Entries: l.Entries, Truncated: l.Truncated}
	for _, e := range l.Entries {
		if e.Type == fsops.TypeDirectory {
			res.Directories++
		} else {
			res.Files++
			res.Bytes += e.Size
		}
	}
	switch by {
	case "size":
		slices.SortStableFunc(res.Entries, func(x, y listEntry) int { return cmp.Compare(y.Size, x.Size) })
	case "modified":
		at := func(e listEntry) time.Time { t, _ := time.Parse(time.RFC3339Nano, e.ModifiedAt); return t }
		slices.SortStableFunc(res.Entries, func(x, y listEntry) int { return at(y).Compare(at(x)) })
	}
	total := len(res.Entries)
	if int64(total) > limit {
		res.Entries, res.Truncated = res.Entries[:limit], true
	}
	if res.Entries == nil {
		res.Entries = []listEntry{}
	}
	var b strings.Builder
	for _, e := range res.Entries {
		b.WriteString(e.Type + " " + strconv.FormatInt(e.Size, 10) + " " + string(appendTextTime(nil, e.ModifiedAt)) + " " + e.Name)
		if e.Type == fsops.TypeDirectory {
			b.WriteByte('/')
		}
		b.WriteByte('\n')
	}
	b.WriteString(strconv.Itoa(res.Files) + " files (" + strconv.FormatInt(res.Bytes, 10) + " bytes), " + strconv.Itoa(res.Directories) + " directories\n")
	switch {
	case l.Truncated:
		b.WriteString("(truncated: the directory has more entries than one listing holds; these are sorted among the first " +
			strconv.Itoa(total) + " by name, and the totals count those)\n")
	case res.Truncated:
		b.WriteString("(truncated: the first " + strconv.Itoa(len(res.Entries)) + " of " + strconv.Itoa(total) + " entries; raise maxEntries)\n")
	}
	return composedResult(res, b.String()), nil
}
