package mcp

import (
	"encoding/json"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// fs_head, fs_tail and fs_read_many: reads composed of fs.read windows (and, for fs_tail,
// fs.stat for the size). Lines end at LF; a last line without one is a line; a CR before an
// LF stays. Windows are asked for at growing sizes (16 KiB, then four times more, up to one
// response frame), so that the first lines of a large file cost one small read.

const (
	maxLines       = 100_000
	maxReadFiles   = 64
	firstWindow    = 16 << 10
	minTailBytes   = 4 // fs_tail's least maxBytes: a window of a character's length holds a character's start
	linesMust      = "an integer from 1 to 100000"
	pathMust       = `a path relative to the granted directory ("." is the directory itself)`
	codeInvalidArg = "invalid_argument" // airlock-fs: an fs.read offset inside a character
)

func maxBytesMust(lo, hi int64) string {
	return "an integer from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
}

func headTool(l tooladapter.Limits) *sdk.Tool {
	budget := composeBudget(l)
	return readOnlyTool("head",
		"Read the first lines of a UTF-8 text file in the granted directory.",
		closedObject([]string{"path", "lines"}, schema{
			"path":     pathProp,
			"lines":    intProp("How many lines, from the first.", 1, maxLines),
			"maxBytes": intProp("At most this many bytes (default: the most).", 1, budget),
		}),
		linesOut("offset", "Byte offset just after the content: fs_read from it continues."))
}

func tailTool(l tooladapter.Limits) *sdk.Tool {
	budget := composeBudget(l)
	return readOnlyTool("tail",
		"Read the last lines of a UTF-8 text file in the granted directory.",
		closedObject([]string{"path", "lines"}, schema{
			"path":     pathProp,
			"lines":    intProp("How many lines, from the last.", 1, maxLines),
			"maxBytes": intProp("At most this many bytes (default: the most).", min(minTailBytes, budget), budget),
		}),
		linesOut("offset", "Byte offset of the content's first byte in the file."))
}

// linesOut is fs_head's and fs_tail's output schema.
func linesOut(offset, desc string) schema {
	return closedObject([]string{"content", "lines", offset, "eof", "truncated"}, schema{
		"content":   schema{"type": "string"},
		"lines":     schema{"type": "integer", "minimum": 0, "description": "Lines in content."},
		offset:      schema{"type": "integer", "minimum": 0, "description": desc},
		"eof":       schema{"type": "boolean", "description": "The content reaches the end of the file."},
		"truncated": schema{"type": "boolean", "description": "maxBytes cut the content before it held the lines asked for."},
	})
}

// linesArgs are fs_head's and fs_tail's arguments.
type linesArgs struct {
	Path     *string `json:"path"`
	Lines    *int64  `json:"lines"`
	MaxBytes *int64  `json:"maxBytes"`
}

// linesResult is fs_head's and fs_tail's result.
type linesResult struct {
	Content   string `json:"content"`
	Lines     int    `json:"lines"`
	Offset    int64  `json:"offset"`
	EOF       bool   `json:"eof"`
	Truncated bool   `json:"truncated"`
}

func (c *composedCall) linesArgs(args json.RawMessage, minBytes int64) (path string, lines, maxBytes int64, perr *protocol.Error) {
	var a linesArgs
	must := map[string]string{"path": pathMust, "lines": linesMust, "maxBytes": maxBytesMust(minBytes, c.budget)}
	if perr = decodeArgs(args, &a, must, "path", "lines"); perr != nil {
		return
	}
	if lines, perr = intArg("lines", a.Lines, 0, 1, maxLines); perr != nil {
		return
	}
	if maxBytes, perr = intArg("maxBytes", a.MaxBytes, c.budget, minBytes, c.budget); perr != nil {
		return
	}
	return *a.Path, lines, maxBytes, nil
}

// countLines counts the lines of s: its LFs, and a last line without one.
func countLines(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// linesText is the text of fs_head and fs_tail: the content, and a line saying so when
// maxBytes cut it.
func linesText(r *linesResult, lines int64, after string) string {
	if !r.Truncated {
		return r.Content
	}
	var b strings.Builder
	b.WriteString(r.Content)
	if r.Content != "" && !strings.HasSuffix(r.Content, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString("(truncated: the " + strconv.FormatInt(lines, 10) + " lines asked for do not fit in maxBytes; " + after + ")\n")
	return b.String()
}

func runHead(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	path, lines, maxBytes, perr := c.linesArgs(args, 1)
	if perr != nil {
		return nil, perr
	}
	var buf strings.Builder
	res := &linesResult{}
	window := int64(firstWindow)
	var seen int64 // LFs so far
	for {
		remaining := maxBytes - int64(buf.Len())
		if remaining <= 0 {
			res.Truncated = true
			break
		}
		r, perr := c.read(path, res.Offset, min(window, remaining))
		if perr != nil {
			if perr.Code == codeInvalidArg && res.Offset > 0 && remaining < 4 {
				// The next character is longer than what is left of maxBytes.
				res.Truncated = true
				break
			}
			return nil, perr
		}
		content, cut := r.Content, -1
		for i := 0; i < len(content); i++ {
			if content[i] == '\n' {
				if seen++; seen == lines {
					cut = i + 1
					break
				}
			}
		}
		if cut >= 0 {
			buf.WriteString(content[:cut])
			res.Offset += int64(cut)
			res.EOF = r.EOF && cut == len(content)
			break
		}
		buf.WriteString(content)
		res.Offset += r.BytesRead
		if r.EOF {
			res.EOF = true
			break
		}
		if r.BytesRead == 0 {
			res.Truncated = true
			break
		}
		window = min(window*4, c.budget)
	}
	res.Content = buf.String()
	res.Lines = countLines(res.Content)
	return composedResult(res, linesText(res, lines, "fs_read at offset "+strconv.FormatInt(res.Offset, 10)+" reads on")), nil
}

// statResult is fs.stat's result.
type statResult struct {
	Type string `json:"type"`
	Size int64  `json:"size"`
}

func runTail(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	path, lines, maxBytes, perr := c.linesArgs(args, min(minTailBytes, c.budget))
	if perr != nil {
		return nil, perr
	}
	data, perr := c.invoke(tooladapter.OpStat, struct {
		Path string `json:"path"`
	}{path})
	if perr != nil {
		return nil, perr
	}
	var st statResult
	if json.Unmarshal(data, &st) != nil {
		return nil, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon's tool result is not readable"}
	}
	if st.Type != fsops.TypeFile {
		// A directory has no lines: what fs_read answers for it (airlock-fs: not_a_file) is
		// the answer.
		if _, perr := c.read(path, 0, 1); perr != nil {
			return nil, perr
		}
		st.Size = 0
	}
	// text is the file's bytes [start, st.Size) as read so far.
	start, text, window := st.Size, "", int64(firstWindow)
	res := &linesResult{EOF: true}
	for start > 0 && tailCut(text, lines) < 0 {
		// A window that begins inside a character begins at the next one (readRange), so
		// it never holds more than maxBytes allows. It held 3 bytes back for a step back
		// to the character's start, also where there was none to take (ASCII, or a window
		// from the file's start): a file of maxBytes bytes came back cut, without its
		// first line (TestHeadAndTail).
		room := maxBytes - int64(len(text))
		if room < start && room < minTailBytes {
			// A window this small might lie inside one character.
			res.Truncated = true
			break
		}
		from := start - min(window, room, start)
		chunk, at, perr := c.readRange(path, from, start)
		if perr != nil {
			return nil, perr
		}
		text, start = chunk+text, at
		window = min(window*4, c.budget)
	}
	switch cut := tailCut(text, lines); {
	case cut >= 0:
		res.Content, res.Offset = text[cut:], start+int64(cut)
	case start == 0:
		res.Content = text
	default:
		// maxBytes ended the reads inside the lines asked for: the partial first line goes.
		res.Truncated = true
		res.Content, res.Offset = text, start
		if i := strings.IndexByte(text, '\n'); i >= 0 && i+1 < len(text) {
			res.Content, res.Offset = text[i+1:], start+int64(i+1)
		}
	}
	res.Lines = countLines(res.Content)
	return composedResult(res, linesText(res, lines, "these are the last "+strconv.Itoa(res.Lines)+
		" lines, from offset "+strconv.FormatInt(res.Offset, 10))), nil
}

// tailCut returns where the last n lines of text begin, or -1 when text may not hold them
// all (it holds fewer than n LFs before its last byte).
func tailCut(text string, n int64) int {
	end := len(text)
	if end > 0 && text[end-1] == '\n' {
		end--
	}
	var seen int64
	for i := end - 1; i >= 0; i-- {
		if text[i] == '\n' {
			if seen++; seen == n {
				return i + 1
			}
		}
	}
	return -1
}

// readRange reads the file's bytes [from, to) and returns them with the offset they begin
// at. fs.read refuses an offset inside a character (invalid_argument), and a window counted
// back from the end may land in one: the start then moves on a byte, at most three times (a
// UTF-8 character is at most four bytes), so that the window holds whole characters and
// never more bytes than asked for. to must begin a character (or be the file's end), and a
// window of at least four bytes then holds one's start. A window cut short by the response
// frame is read on from where it ended.
func (c *composedCall) readRange(path string, from, to int64) (string, int64, *protocol.Error) {
	for on := 0; ; on++ {
		r, perr := c.read(path, from, to-from)
		if perr != nil {
			if perr.Code == codeInvalidArg && on < 3 && from+1 < to {
				from++
				continue
			}
			return "", 0, perr
		}
		got, pos := r.Content, from+r.BytesRead
		for pos < to && !r.EOF && r.BytesRead > 0 {
			if r, perr = c.read(path, pos, to-pos); perr != nil {
				return "", 0, perr
			}
			got += r.Content
			pos += r.BytesRead
		}
		return got, from, nil
	}
}

func readManyTool(l tooladapter.Limits) *sdk.Tool {
	budget := composeBudget(l)
	return readOnlyTool("read many",
		"Read several UTF-8 text files of the granted directory in one call; a file that fails does not fail the others.",
		closedObject([]string{"paths"}, schema{
			"paths":    schema{"type": "array", "minItems": 1, "maxItems": maxReadFiles, "items": pathProp},
			"maxBytes": intProp("At most this many bytes of content in all (default: the most).", 1, budget),
		}),
		closedObject([]string{"files", "truncated"}, schema{
			"files": schema{"type": "array", "items": closedObject([]string{"path", "content", "bytesRead", "eof"}, schema{
				"path":      schema{"type": "string"},
				"content":   schema{"type": "string"},
				"bytesRead": schema{"type": "integer", "minimum": 0, "description": "Bytes of content: fs_read from this offset continues."},
				"eof":       schema{"type": "boolean"},
				"error": closedObject([]string{"code", "message"}, schema{
					"code": schema{"type": "string"}, "message": schema{"type": "string"},
				}),
			})},
			"truncated": schema{"type": "boolean", "description": "maxBytes cut a file's content, or left a file unread."},
		}))
}

// fileRead is one file of fs_read_many's result.
type fileRead struct {
	Path      string     `json:"path"`
	Content   string     `json:"content"`
	BytesRead int64      `json:"bytesRead"`
	EOF       bool       `json:"eof"`
	Error     *fileError `json:"error,omitempty"`
	read      bool
	// short is what was left of maxBytes when that was less than the file's first
	// character: it was not read, though nothing was spent on the files before it.
	short int64
}

type fileError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// runReadMany reads each file whole if the budget allows. First every file is read at once
// (c.parallel at a time) with an equal share of maxBytes; then, in the order given, the files
// that did not end are read on with what is left. So small files cost one call each, in
// parallel, and a large file gets what the others did not use; the result depends on the
// files only, not on timing.
func runReadMany(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	var a struct {
		Paths    *[]string `json:"paths"`
		MaxBytes *int64    `json:"maxBytes"`
	}
	must := map[string]string{"paths": "an array of 1 to 64 paths relative to the granted directory", "maxBytes": maxBytesMust(1, c.budget)}
	if perr := decodeArgs(args, &a, must, "paths"); perr != nil {
		return nil, perr
	}
	if n := len(*a.Paths); n < 1 || n > maxReadFiles {
		return nil, argError("paths", must["paths"])
	}
	maxBytes, perr := intArg("maxBytes", a.MaxBytes, c.budget, 1, c.budget)
	if perr != nil {
		return nil, perr
	}
	files := make([]fileRead, len(*a.Paths))
	for i, p := range *a.Paths {
		files[i].Path = p
	}
	apply := func(f *fileRead, r *readResult, perr *protocol.Error) {
		f.read = true
		if perr != nil {
			f.Error = &fileError{Code: perr.Code, Message: perr.Message}
			return
		}
		f.Content += r.Content
		f.BytesRead += r.BytesRead
		f.EOF = r.EOF
	}
	if share := maxBytes / int64(len(files)); share >= 4 {
		c.all(len(files), func(i int) {
			r, perr := c.read(files[i].Path, 0, share)
			apply(&files[i], r, perr)
		})
	}
	if c.ctx.Err() != nil {
		return nil, errCancelled
	}
	remaining := maxBytes
	for _, f := range files {
		remaining -= f.BytesRead
	}
	for i := range files {
		f := &files[i]
		for f.Error == nil && !f.EOF && remaining > 0 {
			r, perr := c.read(f.Path, f.BytesRead, remaining)
			if isCancelled(perr) {
				return nil, perr
			}
			if perr != nil && perr.Code == codeInvalidArg && remaining < 4 {
				if !f.read {
					f.short = remaining
				}
				break // the next character is longer than what is left
			}
			apply(f, r, perr)
			if perr != nil {
				break
			}
			remaining -= r.BytesRead
			if r.BytesRead == 0 && !r.EOF {
				break
			}
		}
	}
	res := struct {
		Files     []fileRead `json:"files"`
		Truncated bool       `json:"truncated"`
	}{Files: files}
	var b strings.Builder
	for _, f := range files {
		b.WriteString("==> " + f.Path + " <==")
		switch {
		case f.Error != nil:
			b.WriteString(" error " + f.Error.Code + ": " + f.Error.Message + "\n")
			continue
		case !f.read && f.short > 0:
			// It said maxBytes was spent on the files before it, also of the first file.
			res.Truncated = true
			b.WriteString(" (not read: the " + strconv.FormatInt(f.short, 10) + " bytes left of maxBytes are fewer than its first character)\n")
			continue
		case !f.read:
			res.Truncated = true
			b.WriteString(" (not read: maxBytes was spent on the files before it)\n")
			continue
		case !f.EOF:
			res.Truncated = true
			n := strconv.FormatInt(f.BytesRead, 10)
			b.WriteString(" (the first " + n + " bytes: read on with fs_read at offset " + n + ")")
		}
		b.WriteByte('\n')
		b.WriteString(f.Content)
		if f.Content != "" && !strings.HasSuffix(f.Content, "\n") {
			b.WriteByte('\n')
		}
	}
	return composedResult(res, b.String()), nil
}
