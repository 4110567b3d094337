package tooladapter

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Checks of JSON text that DecodeFrame has already walked: one well-formed value without
// duplicate keys. Knowing that, the end of a string is the first quote after an even run of
// backslashes, found with bytes.IndexByte instead of a byte-by-byte scan, so that a result of
// several MiB is not scanned again at walking speed.

// skipString returns the index just past the string that starts at data[i], a quote, in text
// known to be well-formed. A short string (a name, a time) is scanned byte by byte, which is
// cheaper than starting bytes.IndexByte for it; a long one (a read's content) with IndexByte.
func skipString(data []byte, i int) int {
	j := i + 1
	for end := min(len(data), j+shortString); j < end; j++ {
		switch data[j] {
		case '"':
			return j + 1
		case '\\':
			return skipLongString(data, i)
		}
	}
	return skipLongString(data, i)
}

// shortString is how many bytes of a string skipString scans itself.
const shortString = 64

// skipLongString is skipString by bytes.IndexByte.
func skipLongString(data []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return len(data) // not well-formed after all: the caller's token check fails
		}
		j += k
		n := 0
		for n < j-i-1 && data[j-1-n] == '\\' {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
}

func skipSpaces(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// walkedMembers splits the walked object data into the values of its members, each stored in
// out at the index of its name in names. It reports false for anything else, a name with an
// escape or not in names included: the caller then checks data in full.
func walkedMembers(data []byte, names []string, out []json.RawMessage) bool {
	i, ok := walkedObject(data, skipSpaces(data, 0), names, out)
	return ok && skipSpaces(data, i) == len(data)
}

// walkedObject is walkedMembers for the object that starts at data[i], whose members are
// strings, numbers or literals; it returns the index just past the object.
func walkedObject(data []byte, i int, names []string, out []json.RawMessage) (int, bool) {
	if i >= len(data) || data[i] != '{' {
		return i, false
	}
	i = skipSpaces(data, i+1)
	for i < len(data) && data[i] == '"' {
		end := skipString(data, i)
		name := data[i+1 : end-1]
		i = skipSpaces(data, end)
		if i >= len(data) || data[i] != ':' {
			return i, false
		}
		i = skipSpaces(data, i+1)
		start := i
		switch {
		case i >= len(data) || data[i] == '{' || data[i] == '[':
			return i, false
		case data[i] == '"':
			i = skipString(data, i)
		default:
			for i < len(data) && data[i] != ',' && data[i] != '}' && data[i] != ' ' && data[i] != '\t' && data[i] != '\n' && data[i] != '\r' {
				i++
			}
		}
		k := slices.Index(names, string(name))
		if k < 0 {
			return i, false
		}
		out[k] = data[start:i]
		i = skipSpaces(data, i)
		if i < len(data) && data[i] == ',' {
			i = skipSpaces(data, i+1)
		}
	}
	if i >= len(data) || data[i] != '}' {
		return i, false
	}
	return i + 1, true
}

// walkedInt reads an integer member in [lo, hi] as the full check does.
func walkedInt(raw json.RawMessage, lo, hi int64) bool {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return raw != nil && err == nil && n >= lo && n <= hi
}

func walkedBool(raw json.RawMessage) bool {
	return string(raw) == "true" || string(raw) == "false"
}

var (
	readMembers = []string{"content", "bytesRead", "eof"}
	statMembers = []string{"type", "size", "modifiedAt"}
)

// validResultWalked reports true only for valid result data of op that DecodeFrame walked
// (FuzzDecodeFlat holds it to ValidateResult), and false for anything it does not settle, which
// the caller then checks in full. It covers the results of fs.read, up to 4 MiB that it does
// not decode again, and fs.stat, the most frequent call.
func validResultWalked(op string, data []byte) bool {
	var m [3]json.RawMessage
	switch op {
	case OpRead:
		if !walkedMembers(data, readMembers, m[:]) {
			return false
		}
		content := m[0]
		if len(content) < 2 || content[0] != '"' || content[len(content)-1] != '"' {
			return false
		}
		// Decoding never lengthens a JSON string of valid UTF-8 (an escape stands for at most
		// as many bytes as it takes), so text within the bound has a value within it.
		if text := content[1 : len(content)-1]; len(text) > MaxContentBytes || !utf8.Valid(text) {
			return false
		}
		return walkedInt(m[1], 0, MaxContentBytes) && walkedBool(m[2])
	case OpStat:
		if !walkedMembers(data, statMembers, m[:]) {
			return false
		}
		if t := string(m[0]); t != `"`+entryTypeFile+`"` && t != `"`+entryTypeDir+`"` {
			return false
		}
		if at := m[2]; at != nil {
			// The pattern admits no character JSON escapes, so a plain string is the only form
			// of a valid one.
			if len(at) < 2 || at[0] != '"' || !validModifiedAt(string(at[1:len(at)-1])) ||
				len(at)-2 < minModifiedAtLen || len(at)-2 > maxModifiedAtLen {
				return false
			}
		}
		return walkedInt(m[1], 0, maxSafeInteger)
	case OpList:
		return validListWalked(data)
	}
	return false
}

var (
	listMembers  = []string{"entries", "truncated"}
	entryMembers = []string{"name", "type", "size", "modifiedAt"}
)

// validListWalked is validResultWalked for fs.list: each entry's members are split out of the
// walked text and given to the same entry check as ValidateResult's (shapeCheck.listEntry), so
// that a listing of thousands of entries is not decoded again by encoding/json into pointers
// (1.55 → 0.55 ms for a 1,000-entry result frame, the walk included;
// BenchmarkDecodeListResultFrame). An entry or member it does not settle, or a failed check,
// makes it report false, and the caller's full check names the failure.
func validListWalked(data []byte) bool {
	_, ok := WalkList(data, nil)
	return ok
}

// WalkList calls each (when not nil) for every entry of data, an fs.list result already
// walked by the strict decoder (ndjson: one well-formed value without duplicate keys), in
// order, with the entry's members as ValidateResult reads them (size 0 and modifiedAt ""
// where absent), and returns the result's truncated. It reports false, having called each for
// none or some of the entries, when data is not a valid result or not one it settles (a key
// spelled with an escape, for one): a caller that renders a listing then decodes it in full.
// It applies ValidateResult's checks (FuzzListResultWalked), so that airlock mcp can render
// the listing airlockd checked without decoding it again with encoding/json.
func WalkList(data []byte, each func(name, typ string, size int64, modifiedAt string)) (truncated, ok bool) {
	i := skipSpaces(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false, false
	}
	var entries, seenTruncated bool
	i = skipSpaces(data, i+1)
	for i < len(data) && data[i] == '"' {
		end := skipString(data, i)
		name := string(data[i+1 : end-1])
		i = skipSpaces(data, end)
		if i >= len(data) || data[i] != ':' {
			return false, false
		}
		i = skipSpaces(data, i+1)
		switch name {
		case listMembers[0]:
			var ok bool
			if i, ok = walkedEntries(data, i, each); !ok {
				return false, false
			}
			entries = true
		case listMembers[1]:
			switch {
			case bytes.HasPrefix(data[i:], []byte("true")):
				i += len("true")
				truncated = true
			case bytes.HasPrefix(data[i:], []byte("false")):
				i += len("false")
			default:
				return false, false
			}
			seenTruncated = true
		default:
			return false, false
		}
		i = skipSpaces(data, i)
		if i < len(data) && data[i] == ',' {
			i = skipSpaces(data, i+1)
		}
	}
	return truncated, entries && seenTruncated && i < len(data) && data[i] == '}' && skipSpaces(data, i+1) == len(data)
}

// walkedEntries checks the walked array of listing entries that starts at data[i], calls each
// for every one, and returns the index just past it.
func walkedEntries(data []byte, i int, each func(name, typ string, size int64, modifiedAt string)) (int, bool) {
	if i >= len(data) || data[i] != '[' {
		return i, false
	}
	c := &shapeCheck{code: CodeProtocolInvalid}
	var m [4]json.RawMessage
	i = skipSpaces(data, i+1)
	for n := 0; i < len(data) && data[i] == '{'; n++ {
		if n == MaxListEntries {
			return i, false
		}
		m = [4]json.RawMessage{}
		end, ok := walkedObject(data, i, entryMembers, m[:])
		if !ok {
			return i, false
		}
		name, ok := rawString(m[0])
		if !ok {
			return i, false
		}
		var typ string
		switch string(m[1]) { // the two valid types, without a copy
		case `"` + entryTypeFile + `"`:
			typ = entryTypeFile
		case `"` + entryTypeDir + `"`:
			typ = entryTypeDir
		default:
			if typ, ok = rawString(m[1]); !ok {
				return i, false
			}
		}
		var size *int64
		if m[2] != nil {
			s, err := strconv.ParseInt(string(m[2]), 10, 64) // as encoding/json reads an int64
			if err != nil {
				return i, false
			}
			size = &s
		}
		var at *string
		if m[3] != nil {
			s, ok := rawString(m[3])
			if !ok {
				return i, false
			}
			at = &s
		}
		if c.listEntry(&name, &typ, size, at); !c.ok() {
			return i, false
		}
		if each != nil {
			var sz int64
			var mt string
			if size != nil {
				sz = *size
			}
			if at != nil {
				mt = *at
			}
			each(name, typ, sz, mt)
		}
		i = skipSpaces(data, end)
		if i < len(data) && data[i] == ',' {
			i = skipSpaces(data, i+1)
		}
	}
	if i >= len(data) || data[i] != ']' {
		return i, false
	}
	return i + 1, true
}

// compactWalked returns data, a value DecodeFrame walked, without whitespace between tokens:
// data itself when it has none, as adapters write it, else a compacted copy.
func compactWalked(data json.RawMessage) json.RawMessage {
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = skipString(data, i) - 1
		case ' ', '\t', '\n', '\r':
			var buf bytes.Buffer
			if json.Compact(&buf, data) != nil {
				return data
			}
			return buf.Bytes()
		}
	}
	return data
}
