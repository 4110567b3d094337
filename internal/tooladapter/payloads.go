package tooladapter

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Bounds of operation payloads and results. The wire has no defaults: optional bounds are the
// adapter's choice, and only their maxima are fixed.
const (
	MaxContentBytes  = 4 << 20 // fs.read content, fs.write content, fs.edit texts
	MaxListEntries   = 10_000
	MaxSearchResults = 10_000
	MaxQueryLen      = 4096
	MaxMatchTextLen  = 4096
	MaxEdits         = 256
	MaxEntryNameLen  = 255
	minModifiedAtLen = 20
	maxModifiedAtLen = 64
	entryTypeFile    = "file"
	entryTypeDir     = "directory"
)

// validModifiedAt reports whether s matches ^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$, the
// schema's pattern, without a regular expression: it runs on every stat and every list entry
// (TestValidModifiedAt holds it to the pattern).
func validModifiedAt(s string) bool {
	if len(s) < 20 {
		return false
	}
	for i := range 19 {
		c := s[i]
		switch i {
		case 4, 7:
			if c != '-' {
				return false
			}
		case 10:
			if c != 'T' {
				return false
			}
		case 13, 16:
			if c != ':' {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	rest := s[19:]
	if rest == "Z" {
		return true
	}
	if len(rest) < 3 || len(rest) > 11 || rest[0] != '.' || rest[len(rest)-1] != 'Z' {
		return false
	}
	for _, c := range []byte(rest[1 : len(rest)-1]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Request payloads, closed; pointers tell a missing member from a zero one.
type (
	listPayload struct {
		Path       *string `json:"path"`
		MaxEntries *int64  `json:"maxEntries"`
	}
	statPayload struct {
		Path *string `json:"path"`
	}
	readPayload struct {
		Path     *string `json:"path"`
		Offset   *int64  `json:"offset"`
		MaxBytes *int64  `json:"maxBytes"`
	}
	searchPayload struct {
		Path       *string `json:"path"`
		Query      *string `json:"query"`
		MaxResults *int64  `json:"maxResults"`
	}
	writePayload struct {
		Path           *string `json:"path"`
		Content        *string `json:"content"`
		Create         *bool   `json:"create"`
		Overwrite      *bool   `json:"overwrite"`
		ExpectedDigest *string `json:"expectedDigest"`
	}
	editPayload struct {
		Path           *string     `json:"path"`
		Edits          *[]editItem `json:"edits"`
		ExpectedDigest *string     `json:"expectedDigest"`
	}
	editItem struct {
		OldText *string `json:"oldText"`
		NewText *string `json:"newText"`
	}
)

// Result data, closed.
type (
	listResult struct {
		Entries   *[]listEntry `json:"entries"`
		Truncated *bool        `json:"truncated"`
	}
	listEntry struct {
		Name       *string `json:"name"`
		Type       *string `json:"type"`
		Size       *int64  `json:"size"`
		ModifiedAt *string `json:"modifiedAt"`
	}
	statResult struct {
		Type       *string `json:"type"`
		Size       *int64  `json:"size"`
		ModifiedAt *string `json:"modifiedAt"`
	}
	readResult struct {
		Content   *string `json:"content"`
		BytesRead *int64  `json:"bytesRead"`
		EOF       *bool   `json:"eof"`
	}
	searchResult struct {
		Matches   *[]searchMatch `json:"matches"`
		Truncated *bool          `json:"truncated"`
	}
	searchMatch struct {
		Path   *string `json:"path"`
		Line   *int64  `json:"line"`
		Column *int64  `json:"column"`
		Text   *string `json:"text"`
	}
	writeResult struct {
		Created      *bool   `json:"created"`
		BytesWritten *int64  `json:"bytesWritten"`
		Digest       *string `json:"digest"`
	}
	editResult struct {
		Replacements *int64  `json:"replacements"`
		Digest       *string `json:"digest"`
	}
)

// shapeCheck collects the first failure of a payload or result check: the member, whether it
// was missing, and what it must be (for the message: a model that sent it reads it and can
// correct it; the member's value is never quoted).
type shapeCheck struct {
	code    string // the code of every failure but paths
	field   string
	want    string // what field must be, or "" when the check does not say
	missing bool
	path    *protocol.Error
}

func (c *shapeCheck) fail(field string) { c.failWant(field, "", false) }

// failWant records the first failure: field is missing, or is present but not want.
func (c *shapeCheck) failWant(field, want string, missing bool) {
	if c.field == "" && c.path == nil {
		c.field, c.want, c.missing = field, want, missing
	}
}

func (c *shapeCheck) ok() bool { return c.field == "" && c.path == nil }

func (c *shapeCheck) required(field string, present bool) bool {
	if !present {
		c.failWant(field, "", true)
	}
	return present
}

// requiredWant is required for a member whose form the message names.
func (c *shapeCheck) requiredWant(field, want string, present bool) bool {
	if !present {
		c.failWant(field, want, true)
	}
	return present
}

func (c *shapeCheck) intRange(field string, v *int64, lo, hi int64, optional bool) {
	if v == nil {
		if !optional {
			c.failWant(field, intWant(lo, hi), true)
		}
		return
	}
	if *v < lo || *v > hi {
		c.failWant(field, intWant(lo, hi), false)
	}
}

func intWant(lo, hi int64) string {
	if hi == maxSafeInteger {
		return "an integer of at least " + strconv.FormatInt(lo, 10)
	}
	return "an integer from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
}

const (
	pathWant   = `a path relative to the granted directory ("." for the directory itself)`
	digestWant = "64 lowercase hexadecimal digits (the SHA-256 a write or edit returned)"
	boolWant   = "true or false"
)

var queryWant = "a non-empty string of at most " + strconv.Itoa(MaxQueryLen) + " characters"

var editsWant = "an array of 1 to " + strconv.Itoa(MaxEdits) + " edits, each {oldText, newText}"

// memberWants is what each payload member must be, for the message of a member of the wrong
// JSON type (null included), which names the member and this as a range or form failure
// does: the same words where those name the JSON type, the type first where they do not
// (path, expectedDigest). An array item's member is keyed without its index, as the checks
// name it (edits.oldText), and an item itself as edits[].
var memberWants = func() map[string]string {
	m := map[string]string{
		"path":           "a string, " + pathWant,
		"query":          queryWant,
		"content":        contentWant(0),
		"create":         boolWant,
		"overwrite":      boolWant,
		"expectedDigest": "a string of " + digestWant,
		"edits":          editsWant,
		"edits[]":        "an object {oldText, newText}",
		"edits.oldText":  contentWant(1),
		"edits.newText":  contentWant(0),
	}
	for field, b := range payloadInts {
		m[field] = intWant(b.lo, b.hi)
	}
	return m
}()

// payloadInts are the bounds of a payload's integer members (all optional), for their checks
// (payloadInt) and for the message of one of the wrong type (memberWants).
var payloadInts = map[string]struct{ lo, hi int64 }{
	"offset":     {0, maxSafeInteger},
	"maxBytes":   {1, MaxContentBytes},
	"maxEntries": {1, MaxListEntries},
	"maxResults": {1, MaxSearchResults},
}

// payloadInt checks the optional integer payload member field against its payloadInts bounds.
func (c *shapeCheck) payloadInt(field string, v *int64) {
	b := payloadInts[field]
	c.intRange(field, v, b.lo, b.hi, true)
}

// memberWant returns what the payload member at path (as ndjson names it: edits[2].oldText)
// must be, or "".
func memberWant(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if path[i] != '[' {
			b.WriteByte(path[i])
			continue
		}
		j := strings.IndexByte(path[i:], ']')
		if j < 0 {
			return ""
		}
		if i+j+1 == len(path) {
			b.WriteString("[]") // the item itself
		}
		i += j
	}
	return memberWants[b.String()]
}

func (c *shapeCheck) relPath(field string, p *string) {
	if !c.requiredWant(field, pathWant, p != nil) {
		return
	}
	if e := ValidateRelativePath(*p); e != nil && c.ok() {
		c.path = e.With(DetailField, field)
	}
}

func (c *shapeCheck) digest(field string, p *string, optional bool) {
	if p == nil {
		if !optional {
			c.failWant(field, digestWant, true)
		}
		return
	}
	if !validDigest(*p) {
		c.failWant(field, digestWant, false)
	}
}

func (c *shapeCheck) content(field string, p *string, minBytes int) {
	if p == nil || len(*p) < minBytes || len(*p) > MaxContentBytes {
		c.failWant(field, contentWant(minBytes), p == nil)
	}
}

// contentWant is what content of at least minBytes (0 or 1) must be.
func contentWant(minBytes int) string {
	if minBytes > 0 {
		return "a non-empty string of at most " + strconv.Itoa(MaxContentBytes) + " bytes"
	}
	return "a string of at most " + strconv.Itoa(MaxContentBytes) + " bytes"
}

func (c *shapeCheck) modifiedAt(field string, p *string) {
	if p != nil && (len(*p) < minModifiedAtLen || len(*p) > maxModifiedAtLen || !validModifiedAt(*p)) {
		c.failWant(field, "a UTC RFC 3339 time", false)
	}
}

func (c *shapeCheck) entryType(field string, p *string) {
	if p == nil || *p != entryTypeFile && *p != entryTypeDir {
		c.failWant(field, `"file" or "directory"`, p == nil)
	}
}

func (c *shapeCheck) err(what string) *protocol.Error {
	if c.path != nil {
		return c.path
	}
	switch {
	case c.field == "":
		return nil
	case c.want == "" && c.missing:
		return fieldError(c.code, c.field, "%s member %s is missing", what, c.field)
	case c.want == "":
		return fieldError(c.code, c.field, "%s member %s is out of range", what, c.field)
	case c.missing:
		return fieldError(c.code, c.field, "%s member %s is missing: it must be %s", what, c.field, c.want)
	}
	return fieldError(c.code, c.field, "%s member %s must be %s", what, c.field, c.want)
}

// decodeShape decodes raw into v strictly. A failure names the member: one the shape does
// not have, or one of the wrong JSON type, and for a payload's member what it must be (a
// model that sent it reads the message and corrects it).
func decodeShape(code, what string, raw json.RawMessage, v any) *protocol.Error {
	if raw == nil {
		return protocol.Errorf(code, "%s is required", what)
	}
	if err := ndjson.Decode(raw, v, ndjson.Closed); err != nil {
		var de *ndjson.DecodeError
		if errors.As(err, &de) && de.Path != "" {
			switch de.Reason {
			case ndjson.ReasonUnknownField, ndjson.ReasonCaseVariant:
				return fieldError(code, de.Path, "%s member %s is not one this operation takes", what, de.Path)
			case ndjson.ReasonType:
				if want := memberWant(de.Path); want != "" && what == "payload" {
					return fieldError(code, de.Path, "%s member %s must be %s", what, de.Path, want)
				}
				return fieldError(code, de.Path, "%s member %s is not of its type (see the operation's schema)", what, de.Path)
			}
			return fieldError(code, de.Path, "%s is not a closed %s object", what, what)
		}
		return fieldError(code, what, "%s is not a closed %s object", what, what)
	}
	return nil
}

// ValidatePayload checks an invoke payload against the closed request schema of op. A path that
// breaks the relative-path rules is invalid_tool_adapter_path; anything else is
// adapter_request_invalid. It does not look at the filesystem: see ResolveUnder.
func ValidatePayload(op string, raw json.RawMessage) *protocol.Error {
	_, e := PayloadPath(op, raw)
	return e
}

// PayloadPath validates a payload as ValidatePayload does and returns its path member, for a
// caller that confines the path before it sends the payload.
func PayloadPath(op string, raw json.RawMessage) (string, *protocol.Error) {
	c := &shapeCheck{code: CodeRequestInvalid}
	var p *string
	var e *protocol.Error
	switch op {
	case OpList:
		var v listPayload
		if e = decodeFlat(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
			c.payloadInt("maxEntries", v.MaxEntries)
		}
	case OpStat:
		var v statPayload
		if e = decodeFlat(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
		}
	case OpRead:
		var v readPayload
		if e = decodeFlat(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
			c.payloadInt("offset", v.Offset)
			c.payloadInt("maxBytes", v.MaxBytes)
		}
	case OpSearch:
		var v searchPayload
		if e = decodeFlat(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
			if v.Query == nil || *v.Query == "" || utf8.RuneCountInString(*v.Query) > MaxQueryLen {
				c.failWant("query", queryWant, v.Query == nil)
			}
			c.payloadInt("maxResults", v.MaxResults)
		}
	case OpWrite:
		var v writePayload
		if e = decodeFlat(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
			c.content("content", v.Content, 0)
			c.digest("expectedDigest", v.ExpectedDigest, true)
		}
	case OpEdit:
		var v editPayload
		if e = decodeShape(c.code, "payload", raw, &v); e == nil {
			p = v.Path
			c.relPath("path", v.Path)
			if c.requiredWant("edits", editsWant, v.Edits != nil) {
				if n := len(*v.Edits); n < 1 || n > MaxEdits {
					c.failWant("edits", editsWant, false)
				}
				for _, ed := range *v.Edits {
					c.content("edits.oldText", ed.OldText, 1)
					c.content("edits.newText", ed.NewText, 0)
				}
			}
			c.digest("expectedDigest", v.ExpectedDigest, true)
		}
	default:
		return "", protocol.Errorf(CodeOperationDenied, "operation is not a tool operation")
	}
	if e != nil {
		return "", e
	}
	if e := c.err("payload"); e != nil {
		return "", e
	}
	return *p, nil
}

// listEntry checks one entry of fs.list's result data; nil is a missing member.
func (c *shapeCheck) listEntry(name, typ *string, size *int64, modifiedAt *string) {
	if c.required("entries.name", name != nil) && !validEntryName(*name) {
		c.fail("entries.name")
	}
	c.entryType("entries.type", typ)
	c.intRange("entries.size", size, 0, maxSafeInteger, true)
	c.modifiedAt("entries.modifiedAt", modifiedAt)
}

// ValidateListEntries checks fs.list result data given as the values an adapter is about to
// encode rather than as JSON: n entries, entry i's members as entry(i) returns them, with ""
// for a modifiedAt the encoding omits. It applies exactly ValidateResult's checks, so that an
// adapter can check a listing before sending it without decoding its own encoding, which for
// thousands of entries costs more than the listing itself. The values must encode as
// themselves: strings that are valid UTF-8 (a name that is not fails the check anyway).
func ValidateListEntries(n int, entry func(i int) (name, typ string, size int64, modifiedAt string)) *protocol.Error {
	c := &shapeCheck{code: CodeProtocolInvalid}
	if n > MaxListEntries {
		c.fail("entries")
	}
	for i := 0; i < n && c.ok(); i++ {
		name, typ, size, modifiedAt := entry(i)
		var at *string
		if modifiedAt != "" {
			at = &modifiedAt
		}
		c.listEntry(&name, &typ, &size, at)
	}
	return c.err("data")
}

// ValidateResult checks the data of a successful result against the closed result schema of
// op. Failures are adapter_protocol_invalid: an adapter that answers out of contract is broken.
func ValidateResult(op string, raw json.RawMessage) *protocol.Error {
	c := &shapeCheck{code: CodeProtocolInvalid}
	var e *protocol.Error
	switch op {
	case OpList:
		var v listResult
		if e = decodeShape(c.code, "data", raw, &v); e == nil {
			if c.required("entries", v.Entries != nil) {
				if len(*v.Entries) > MaxListEntries {
					c.fail("entries")
				}
				for _, en := range *v.Entries {
					c.listEntry(en.Name, en.Type, en.Size, en.ModifiedAt)
				}
			}
			c.requiredWant("truncated", boolWant, v.Truncated != nil)
		}
	case OpStat:
		var v statResult
		if e = decodeFlat(c.code, "data", raw, &v); e == nil {
			c.entryType("type", v.Type)
			c.intRange("size", v.Size, 0, maxSafeInteger, false)
			c.modifiedAt("modifiedAt", v.ModifiedAt)
		}
	case OpRead:
		if validReadResult(raw) {
			return nil
		}
		var v readResult
		if e = decodeFlat(c.code, "data", raw, &v); e == nil {
			c.content("content", v.Content, 0)
			c.intRange("bytesRead", v.BytesRead, 0, MaxContentBytes, false)
			c.requiredWant("eof", boolWant, v.EOF != nil)
		}
	case OpSearch:
		var v searchResult
		if e = decodeShape(c.code, "data", raw, &v); e == nil {
			if c.required("matches", v.Matches != nil) {
				if len(*v.Matches) > MaxSearchResults {
					c.fail("matches")
				}
				for _, m := range *v.Matches {
					if c.required("matches.path", m.Path != nil) && ValidateRelativePath(*m.Path) != nil {
						c.fail("matches.path")
					}
					c.intRange("matches.line", m.Line, 1, maxSafeInteger, false)
					c.intRange("matches.column", m.Column, 1, maxSafeInteger, false)
					// text is the matching line without its LF, so it never holds one.
					if c.required("matches.text", m.Text != nil) &&
						(utf8.RuneCountInString(*m.Text) > MaxMatchTextLen || strings.IndexByte(*m.Text, '\n') >= 0) {
						c.fail("matches.text")
					}
				}
			}
			c.requiredWant("truncated", boolWant, v.Truncated != nil)
		}
	case OpWrite:
		var v writeResult
		if e = decodeFlat(c.code, "data", raw, &v); e == nil {
			c.requiredWant("created", boolWant, v.Created != nil)
			c.intRange("bytesWritten", v.BytesWritten, 0, MaxContentBytes, false)
			c.digest("digest", v.Digest, false)
		}
	case OpEdit:
		var v editResult
		if e = decodeFlat(c.code, "data", raw, &v); e == nil {
			c.intRange("replacements", v.Replacements, 0, MaxEdits, false)
			c.digest("digest", v.Digest, false)
		}
	default:
		return protocol.Errorf(CodeProtocolInvalid, "operation is not a tool operation")
	}
	if e != nil {
		return e
	}
	return c.err("data")
}

// Raw mirrors of the flat payload and result shapes: the same member names, each kept as JSON
// text.
type (
	listPayloadRaw struct {
		Path       json.RawMessage `json:"path"`
		MaxEntries json.RawMessage `json:"maxEntries"`
	}
	statPayloadRaw struct {
		Path json.RawMessage `json:"path"`
	}
	readPayloadRaw struct {
		Path     json.RawMessage `json:"path"`
		Offset   json.RawMessage `json:"offset"`
		MaxBytes json.RawMessage `json:"maxBytes"`
	}
	searchPayloadRaw struct {
		Path       json.RawMessage `json:"path"`
		Query      json.RawMessage `json:"query"`
		MaxResults json.RawMessage `json:"maxResults"`
	}
	writePayloadRaw struct {
		Path           json.RawMessage `json:"path"`
		Content        json.RawMessage `json:"content"`
		Create         json.RawMessage `json:"create"`
		Overwrite      json.RawMessage `json:"overwrite"`
		ExpectedDigest json.RawMessage `json:"expectedDigest"`
	}
	statResultRaw struct {
		Type       json.RawMessage `json:"type"`
		Size       json.RawMessage `json:"size"`
		ModifiedAt json.RawMessage `json:"modifiedAt"`
	}
	readResultRaw struct {
		Content   json.RawMessage `json:"content"`
		BytesRead json.RawMessage `json:"bytesRead"`
		EOF       json.RawMessage `json:"eof"`
	}
	writeResultRaw struct {
		Created      json.RawMessage `json:"created"`
		BytesWritten json.RawMessage `json:"bytesWritten"`
		Digest       json.RawMessage `json:"digest"`
	}
	editResultRaw struct {
		Replacements json.RawMessage `json:"replacements"`
		Digest       json.RawMessage `json:"digest"`
	}
)

// decodeFlat decodes a flat payload or result shape as decodeShape does. A well-typed value, the
// common case, is checked and converted in one pass over a raw mirror of the shape, without the
// reflective second pass of encoding/json; anything the mirror does not settle (a member of the
// wrong type, null, a number that is not an int64) goes through decodeShape, which is the
// reference and names the failure (FuzzDecodeFlat).
func decodeFlat(code, what string, raw json.RawMessage, v any) *protocol.Error {
	if decodeMirror(raw, v) {
		return nil
	}
	return decodeShape(code, what, raw, v)
}

// decodeMirror fills v, a pointer to a flat shape, when raw is a closed object of that shape
// whose every member has the JSON type of its field. It reports false, leaving v in any state,
// for everything else. The raw mirror is decoded in place (ndjson.DecodeAliased): its members
// are converted to v's strings and numbers before it goes, so they need no copy of raw.
func decodeMirror(raw json.RawMessage, v any) bool {
	ok := true
	str := func(m json.RawMessage) *string {
		if m == nil || !ok {
			return nil
		}
		s, isStr := rawString(m)
		ok = isStr
		return &s
	}
	num := func(m json.RawMessage) *int64 {
		if m == nil || !ok {
			return nil
		}
		// encoding/json decodes a number into an int64 with exactly this call.
		n, err := strconv.ParseInt(string(m), 10, 64)
		ok = err == nil
		return &n
	}
	boolean := func(m json.RawMessage) *bool {
		if m == nil || !ok {
			return nil
		}
		b := string(m) == "true"
		ok = b || string(m) == "false"
		return &b
	}
	switch v := v.(type) {
	case *listPayload:
		var r listPayloadRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = listPayload{Path: str(r.Path), MaxEntries: num(r.MaxEntries)}
	case *statPayload:
		var r statPayloadRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = statPayload{Path: str(r.Path)}
	case *readPayload:
		var r readPayloadRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = readPayload{Path: str(r.Path), Offset: num(r.Offset), MaxBytes: num(r.MaxBytes)}
	case *searchPayload:
		var r searchPayloadRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = searchPayload{Path: str(r.Path), Query: str(r.Query), MaxResults: num(r.MaxResults)}
	case *writePayload:
		var r writePayloadRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = writePayload{Path: str(r.Path), Content: str(r.Content), Create: boolean(r.Create),
			Overwrite: boolean(r.Overwrite), ExpectedDigest: str(r.ExpectedDigest)}
	case *statResult:
		var r statResultRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = statResult{Type: str(r.Type), Size: num(r.Size), ModifiedAt: str(r.ModifiedAt)}
	case *readResult:
		var r readResultRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = readResult{Content: str(r.Content), BytesRead: num(r.BytesRead), EOF: boolean(r.EOF)}
	case *writeResult:
		var r writeResultRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = writeResult{Created: boolean(r.Created), BytesWritten: num(r.BytesWritten), Digest: str(r.Digest)}
	case *editResult:
		var r editResultRaw
		if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil {
			return false
		}
		*v = editResult{Replacements: num(r.Replacements), Digest: str(r.Digest)}
	default:
		return false
	}
	return ok
}

// validReadResult reports whether raw is a valid read result without decoding its content, up
// to 4 MiB that only its length is checked for. Decoding never lengthens a JSON string of valid
// UTF-8 (an escape stands for at most as many bytes as it takes), so content whose text is
// valid UTF-8 and within the bound has a value within it. It reports false, and the caller
// decodes everything, for any other input, so that a refusal is named as before
// (FuzzDecodeFlat checks that it accepts nothing the full check refuses). raw is decoded in
// place: its members are only looked at, so up to 4 MiB of content are not copied.
func validReadResult(raw json.RawMessage) bool {
	var r readResultRaw
	if ndjson.DecodeAliased(raw, &r, ndjson.Closed) != nil || len(r.Content) < 2 || r.Content[0] != '"' {
		return false
	}
	if text := r.Content[1 : len(r.Content)-1]; len(text) > MaxContentBytes || !utf8.Valid(text) {
		return false
	}
	n, err := strconv.ParseInt(string(r.BytesRead), 10, 64)
	if r.BytesRead == nil || err != nil || n < 0 || n > MaxContentBytes {
		return false
	}
	return string(r.EOF) == "true" || string(r.EOF) == "false"
}

func validEntryName(n string) bool {
	if n == "." || n == ".." || strings.Contains(n, "/") || !validText(n, MaxEntryNameLen) {
		return false
	}
	return !strings.ContainsFunc(n, unicode.IsControl)
}
