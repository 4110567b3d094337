package validate

// This file owns the tool-adapter probes: bind and the binds that must be refused, the happy
// path of each operation and the shapes of the results it decodes, traversal, bounds,
// idempotency, abort and revoke.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

func (h *toolHarness) probeBind() bool {
	tc, bound, err := h.bind()
	if err != nil {
		h.fail(ProbeToolBind, err.Error())
		return false
	}
	h.conn = tc
	var problems []string
	if !slices.Equal(bound.Operations, h.desc.Operations) {
		problems = append(problems, fmt.Sprintf("bound operations %v differ from the descriptor's %v (order included)", bound.Operations, h.desc.Operations))
	}
	if bound.Limits == nil {
		problems = append(problems, "bound carries no limits")
	} else {
		got, want := reflect.ValueOf(*bound.Limits), reflect.ValueOf(h.desc.Limits)
		for i := range got.NumField() {
			if got.Field(i).Int() != want.Field(i).Int() {
				tag := strings.Split(got.Type().Field(i).Tag.Get("json"), ",")[0]
				problems = append(problems, fmt.Sprintf("bound limit %s is %d, the descriptor's %d", tag, got.Field(i).Int(), want.Field(i).Int()))
			}
		}
	}
	h.result(ProbeToolBind, problems, "")
	return true
}

// probeBindRefused opens connections that must be closed without a byte written: a bind with
// another handle, and an invoke before any bind. A peer without the handle learns nothing.
func (h *toolHarness) probeBindRefused() {
	other := make([]byte, len(h.handle))
	for i := range other {
		other[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[randByte()%64]
	}
	bind := h.frame(tooladapter.KindBind)
	bind.CapabilityHandle = string(other)
	bind.Operations = h.desc.Operations
	l := h.desc.Limits
	bind.Limits = &l
	inv := h.frame(tooladapter.KindInvoke)
	inv.RequestID, inv.IdempotencyKey, inv.Operation = h.nextID("req"), h.nextID("key"), h.desc.Operations[0]
	inv.Payload = json.RawMessage(`{"path":"."}`)
	var problems []string
	for _, c := range []struct {
		what string
		f    *outFrame
	}{{"a bind with another handle", bind}, {"an invoke before bind", inv}} {
		tc, err := h.dial()
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if tc.send(c.f) == nil {
			select {
			case m := <-tc.lines:
				if m.err != errClosed {
					problems = append(problems, c.what+" was answered")
				}
			case <-time.After(h.wait):
				problems = append(problems, c.what+" left the connection open")
			case <-h.ctx.Done():
			}
		}
		tc.close()
	}
	h.result(ProbeToolBindRefused, problems, "")
}

func randByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}

type (
	listData struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
			Size *int64 `json:"size"`
		} `json:"entries"`
		Truncated bool `json:"truncated"`
	}
	statData struct {
		Type string `json:"type"`
		Size int64  `json:"size"`
	}
	readData struct {
		Content   string `json:"content"`
		BytesRead int64  `json:"bytesRead"`
		EOF       bool   `json:"eof"`
	}
	searchData struct {
		Matches []struct {
			Path   string `json:"path"`
			Line   int64  `json:"line"`
			Column int64  `json:"column"`
			Text   string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	writeData struct {
		Created      bool   `json:"created"`
		BytesWritten int64  `json:"bytesWritten"`
		Digest       string `json:"digest"`
	}
	editData struct {
		Replacements int64  `json:"replacements"`
		Digest       string `json:"digest"`
	}
)

func sha(s string) string { s2 := sha256.Sum256([]byte(s)); return hex.EncodeToString(s2[:]) }

// probeOperation runs the happy path of one operation, or skips it when it is not granted.
// Every problem names the request it is about (sentText), path and arguments included.
func (h *toolHarness) probeOperation(op string) {
	if !h.desc.Grants(op) {
		h.skip(op, "not granted")
		return
	}
	hello := helloText(h.needle)
	var problems []string
	// check calls op with payload, decodes a success into v and, if that worked, runs verify,
	// whose problems are prefixed with the request.
	check := func(payload map[string]any, v any, verify func(bad func(format string, args ...any))) bool {
		if err := h.callOK(op, payload, v); err != nil {
			problems = append(problems, err.Error())
			return false
		}
		sent := sentText(op, payload)
		verify(func(format string, args ...any) { problems = append(problems, sent+": "+fmt.Sprintf(format, args...)) })
		return true
	}
	switch op {
	case tooladapter.OpList:
		var d listData
		check(map[string]any{"path": h.base, "maxEntries": 100}, &d, func(bad func(string, ...any)) {
			seen := map[string]string{}
			for _, e := range d.Entries {
				seen[e.Name] = e.Type
				if e.Name == "hello.txt" && e.Size != nil && *e.Size != int64(len(hello)) {
					bad("hello.txt listed with size %d, want %d", *e.Size, len(hello))
				}
			}
			for _, name := range []string{"dir", "hello.txt", "many", "window.txt"} {
				typ := map[string]string{"hello.txt": "file", "dir": "directory", "many": "directory", "window.txt": "file"}[name]
				if seen[name] != typ {
					bad("%s listed as %q, want %q (the harness created it under --scratch)", name, seen[name], typ)
				}
			}
			if d.Truncated {
				bad("a 10-entry directory listed as truncated")
			}
		})
	case tooladapter.OpStat:
		var d statData
		ok := check(map[string]any{"path": h.rel("hello.txt")}, &d, func(bad func(string, ...any)) {
			if d.Type != "file" || d.Size != int64(len(hello)) {
				bad("%s of %d bytes, want file of %d", d.Type, d.Size, len(hello))
			}
		})
		if ok {
			check(map[string]any{"path": "."}, &d, func(bad func(string, ...any)) {
				if d.Type != "directory" {
					bad("%s, want directory", d.Type)
				}
			})
		}
	case tooladapter.OpRead:
		var d readData
		check(map[string]any{"path": h.rel("hello.txt")}, &d, func(bad func(string, ...any)) {
			if d.Content != hello || d.BytesRead != int64(len(hello)) || !d.EOF {
				bad("gave %d bytes, eof %v, not the file's %d bytes with eof true", d.BytesRead, d.EOF, len(hello))
			}
		})
	case tooladapter.OpSearch:
		var d searchData
		check(map[string]any{"path": h.base, "query": h.needle}, &d, func(bad func(string, ...any)) {
			if len(d.Matches) != 1 {
				bad("found %d matches, want 1", len(d.Matches))
			} else if m := d.Matches[0]; m.Path != h.rel("hello.txt") || m.Line != 2 || m.Column != 10 {
				bad("match at %q line %d column %d, want %q line 2 column 10", m.Path, m.Line, m.Column, h.rel("hello.txt"))
			}
		})
	case tooladapter.OpWrite:
		var d writeData
		const content = "written by airlock validate\n"
		check(map[string]any{"path": h.rel("written.txt"), "content": content, "create": true, "overwrite": false}, &d, func(bad func(string, ...any)) {
			if !d.Created || d.BytesWritten != int64(len(content)) || d.Digest != sha(content) {
				bad("answered created %v, bytesWritten %d, digest %s; want true, %d, %s", d.Created, d.BytesWritten, d.Digest, len(content), sha(content))
			}
			if b, _ := os.ReadFile(filepath.Join(h.baseAbs, "written.txt")); string(b) != content {
				bad("the file under --scratch does not hold the content")
			}
		})
	case tooladapter.OpEdit:
		var d editData
		edits := []map[string]string{{"oldText": "beta", "newText": "gamma"}}
		check(map[string]any{"path": h.rel("edit.txt"), "edits": edits}, &d, func(bad func(string, ...any)) {
			if d.Replacements != 1 || d.Digest != sha("alpha gamma\n") {
				bad("answered replacements %d, digest %s; want 1, %s", d.Replacements, d.Digest, sha("alpha gamma\n"))
			}
			if b, _ := os.ReadFile(filepath.Join(h.baseAbs, "edit.txt")); string(b) != "alpha gamma\n" {
				bad("the file under --scratch holds %q", b)
			}
		})
	}
	h.result(op, problems, "")
}

// traversalCorpus returns paths that must never resolve to anything but an error: escapes,
// absolute paths, backslashes, control characters, non-canonical forms, symlinks to outside
// and inside the root, and symlinked parents.
func (h *toolHarness) traversalCorpus() []string {
	b := h.base
	secret := "secret-" + h.marker + ".txt"
	return []string{
		"..", "../", "../..", "./..", "../" + filepath.Base(h.outside), "../../../../../../etc/passwd",
		b + "/..", b + "/../..", b + "/dir/../../..", b + "/../../" + filepath.Base(h.outside) + "/" + secret,
		"/", "/etc/passwd", filepath.Join(h.outside, secret), h.baseAbs + "/hello.txt", "//" + b,
		"..\\..", b + "\\..\\..", "..\\" + b, b + "\\hello.txt",
		b + "/hello.txt\x00", "a\x00b", b + "/\nhello.txt", "\x7f", b + "/hello.txt\r", "\x1b[2J",
		"", b + "//hello.txt", "./" + b + "/hello.txt", b + "/dir/../hello.txt", b + "/.",
		b + "/link-out", b + "/link-out/" + secret, b + "/link-file", b + "/link-in", b + "/link-in/inner.txt",
		b + "/link-up", b + "/link-up/" + filepath.Base(h.cfg.Scratch), "\u2025/x", "%2e%2e/" + secret,
		strings.Repeat("a/", 2100) + "x",
	}
}

func (h *toolHarness) traversalPayload(op, p string) any {
	switch op {
	case tooladapter.OpSearch:
		return map[string]any{"path": p, "query": h.marker}
	case tooladapter.OpWrite:
		return map[string]any{"path": p, "content": "airlock traversal probe\n", "create": true, "overwrite": true}
	case tooladapter.OpEdit:
		return map[string]any{"path": p, "edits": []map[string]string{{"oldText": h.marker, "newText": "x"}}}
	}
	return map[string]any{"path": p}
}

func (h *toolHarness) probeTraversal() {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	corpus := h.traversalCorpus()
	ops, unanswered := 0, 0
	for _, op := range h.desc.Operations {
		ops++
		for _, p := range corpus {
			if unanswered == 3 {
				break // a hung adapter would take a wait per path
			}
			payload := h.traversalPayload(op, p)
			f, err := h.call(op, payload, "")
			if err != nil {
				unanswered++
				bad("%v", err)
				continue
			}
			if f.OK {
				bad("%s succeeded, want an error result", sentText(op, payload))
			}
			if bytes.Contains(f.Data, []byte(h.marker)) || bytes.Contains(f.Data, []byte(h.needle)) {
				bad("%s returned content it must refuse", sentText(op, payload))
			}
		}
	}
	if h.desc.Grants(tooladapter.OpSearch) {
		var d searchData
		payload := map[string]any{"path": h.base, "query": h.marker}
		if err := h.callOK(tooladapter.OpSearch, payload, &d); err == nil && len(d.Matches) > 0 {
			bad("%s found the outside file through a symlink", sentText(tooladapter.OpSearch, payload))
		}
	}
	if h.desc.Grants(tooladapter.OpList) {
		var d listData
		payload := map[string]any{"path": h.base}
		if err := h.callOK(tooladapter.OpList, payload, &d); err == nil {
			for _, e := range d.Entries {
				if strings.HasPrefix(e.Name, "link-") {
					bad("%s reports the symlink %s as a %s; symlinks are omitted", sentText(tooladapter.OpList, payload), e.Name, e.Type)
				}
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(h.outside, "secret-"+h.marker+".txt")); err != nil || string(b) != h.marker+"\n" {
		bad("the outside file was modified")
	}
	if ents, _ := os.ReadDir(h.outside); len(ents) != 1 {
		bad("a file was created outside the root")
	}
	h.result(ProbeToolTraversal, problems, fmt.Sprintf("%d paths × %d operations refused", len(corpus), ops))
}

func (h *toolHarness) probeBounds() {
	list, read := h.desc.Grants(tooladapter.OpList), h.desc.Grants(tooladapter.OpRead)
	if !list && !read {
		h.skip(ProbeToolBounds, "neither fs.list nor fs.read is granted")
		return
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if list {
		var d listData
		payload := map[string]any{"path": h.rel("many"), "maxEntries": 2}
		if err := h.callOK(tooladapter.OpList, payload, &d); err != nil {
			bad("%v", err)
		} else if len(d.Entries) > 2 || !d.Truncated {
			bad("%s of a directory of 5 files gave %d entries, truncated %v; want at most 2, truncated true",
				sentText(tooladapter.OpList, payload), len(d.Entries), d.Truncated)
		}
	}
	if read {
		text := windowText()
		for _, w := range []struct{ off, max int }{{0, 10}, {10, 7}, {95, 10}, {99, 1}, {100, 5}, {200, 5}} {
			var d readData
			payload := map[string]any{"path": h.rel("window.txt"), "offset": w.off, "maxBytes": w.max}
			if err := h.callOK(tooladapter.OpRead, payload, &d); err != nil {
				if w.off > len(text) {
					continue // reading past the end may be an error
				}
				bad("%v", err)
				continue
			}
			lo := min(w.off, len(text))
			want := text[lo:min(lo+w.max, len(text))]
			if d.Content != want || d.BytesRead != int64(len(want)) || d.EOF != (lo+w.max >= len(text)) {
				bad("%s of a 100-byte file gave %d bytes, eof %v; want %d bytes, eof %v",
					sentText(tooladapter.OpRead, payload), d.BytesRead, d.EOF, len(want), lo+w.max >= len(text))
			}
		}
		size := int(h.desc.Limits.MaxResponseBytes) + 4096
		size = min(size, tooladapter.MaxContentBytes)
		payload := map[string]any{"path": h.rel("big.txt"), "maxBytes": size}
		f, err := h.call(tooladapter.OpRead, payload, "")
		switch {
		case err != nil:
			bad("a read larger than maxResponseBytes: %v", err)
		case f.OK:
			var d readData
			json.Unmarshal(f.Data, &d)
			if d.BytesRead >= h.desc.Limits.MaxResponseBytes || d.Content != strings.Repeat("a", len(d.Content)) || int64(len(d.Content)) != d.BytesRead {
				bad("%s of a %d-byte file returned %d bytes, not a prefix that fits maxResponseBytes %d",
					sentText(tooladapter.OpRead, payload), size, d.BytesRead, h.desc.Limits.MaxResponseBytes)
			}
		}
	}
	h.result(ProbeToolBounds, problems, "")
}

func (h *toolHarness) probeIdempotency() {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	key := h.nextID("idem")
	if h.desc.Grants(tooladapter.OpWrite) {
		p := map[string]any{"path": h.rel("idem.txt"), "content": "first\n", "create": true, "overwrite": true}
		sent := sentText(tooladapter.OpWrite, p) + " with idempotencyKey " + key
		f1, err := h.call(tooladapter.OpWrite, p, key)
		if err != nil || !f1.OK {
			h.fail(ProbeToolIdempotency, fmt.Sprintf("the first %s failed: %v", sent, describeFrame(f1, err)))
			return
		}
		abs := filepath.Join(h.baseAbs, "idem.txt")
		os.WriteFile(abs, []byte("changed by the harness\n"), 0o600)
		f2, err := h.call(tooladapter.OpWrite, p, key)
		if err != nil || !f2.OK {
			bad("the replay of %s failed: %v", sent, describeFrame(f2, err))
		} else if !sameJSON(f1.Data, f2.Data) {
			bad("the replay of %s answered other data than the first result", sent)
		}
		if b, _ := os.ReadFile(abs); string(b) != "changed by the harness\n" {
			bad("the replay of %s wrote the file again", sent)
		}
		h.result(ProbeToolIdempotency, problems, "fs.write replayed")
		return
	}
	op := h.fallbackOp()
	sent := sentText(op, h.happyPayload(op)) + " with idempotencyKey " + key
	f1, err1 := h.call(op, h.happyPayload(op), key)
	f2, err2 := h.call(op, h.happyPayload(op), key)
	switch {
	case err1 != nil || err2 != nil || !f1.OK || !f2.OK:
		bad("%s twice: %v, then %v", sent, describeFrame(f1, err1), describeFrame(f2, err2))
	case !sameJSON(f1.Data, f2.Data):
		bad("the replay of %s answered other data than the first result", sent)
	}
	h.result(ProbeToolIdempotency, problems, op+" replayed")
}

func (h *toolHarness) fallbackOp() string {
	for _, op := range []string{tooladapter.OpRead, tooladapter.OpStat, tooladapter.OpList, tooladapter.OpSearch, tooladapter.OpEdit} {
		if h.desc.Grants(op) {
			return op
		}
	}
	return h.desc.Operations[0]
}

func (h *toolHarness) happyPayload(op string) any {
	switch op {
	case tooladapter.OpList:
		return map[string]any{"path": h.base}
	case tooladapter.OpSearch:
		return map[string]any{"path": h.base, "query": h.needle}
	case tooladapter.OpWrite:
		return map[string]any{"path": h.rel("abort.txt"), "content": "abort\n", "create": true, "overwrite": true}
	case tooladapter.OpEdit:
		return map[string]any{"path": h.rel("hello.txt"), "edits": []map[string]string{{"oldText": "hello", "newText": "hello"}}}
	case tooladapter.OpRead:
		return map[string]any{"path": h.rel("big.txt"), "maxBytes": 4096}
	}
	return map[string]any{"path": h.rel("hello.txt")}
}

func sameJSON(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// probeAbort sends an invoke and, at once, an abort of it: the adapter must answer an aborted
// frame that names both ids, and at most one result for the target.
func (h *toolHarness) probeAbort() {
	tc, err := h.live()
	if err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	op := h.fallbackOp()
	p, _ := json.Marshal(h.happyPayload(op))
	target, id := h.nextID("req"), h.nextID("abort")
	inv := h.frame(tooladapter.KindInvoke)
	inv.RequestID, inv.IdempotencyKey, inv.Operation, inv.Payload = target, h.nextID("key"), op, p
	ab := h.frame(tooladapter.KindAbort)
	ab.RequestID, ab.TargetRequestID = id, target
	if err := tc.send(inv); err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	if err := tc.send(ab); err != nil {
		h.fail(ProbeToolAbort, err.Error())
		return
	}
	sent := fmt.Sprintf("abort %s of %s (requestId %s)", id, sentText(op, json.RawMessage(p)), target)
	in, err := tc.await(func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindAborted }, h.wait)
	if err != nil {
		h.fail(ProbeToolAbort, fmt.Sprintf("%s: no aborted frame: %v", sent, err))
		return
	}
	var problems []string
	if in.f.RequestID != id || in.f.TargetRequestID != target {
		problems = append(problems, sent+": the aborted frame does not carry the abort's requestId and targetRequestId")
	}
	isTarget := func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindResult && f.RequestID == target }
	results := 0
	if _, err := tc.await(isTarget, 500*time.Millisecond); err == nil {
		results++
		if _, err := tc.await(isTarget, 200*time.Millisecond); err == nil {
			results++
		}
	}
	if results > 1 {
		problems = append(problems, sent+": the aborted invoke got two results")
	}
	h.result(ProbeToolAbort, problems, fmt.Sprintf("aborted %v", in.f.Aborted))
}

// probeRevoke sends revoke: the adapter must answer revoked and close the connection.
func (h *toolHarness) probeRevoke() {
	tc, err := h.live()
	if err != nil {
		h.fail(ProbeToolRevoke, err.Error())
		return
	}
	if err := tc.send(h.frame(tooladapter.KindRevoke)); err != nil {
		h.fail(ProbeToolRevoke, err.Error())
		return
	}
	if _, err := tc.await(func(f *tooladapter.Frame) bool { return f.Kind == tooladapter.KindRevoked }, h.wait); err != nil {
		h.fail(ProbeToolRevoke, fmt.Sprintf("no revoked frame: %v", err))
		return
	}
	if _, err := tc.await(func(*tooladapter.Frame) bool { return false }, h.wait); err != errClosed {
		h.fail(ProbeToolRevoke, "the adapter did not close the connection after revoked")
		return
	}
	h.pass(ProbeToolRevoke, "")
}
