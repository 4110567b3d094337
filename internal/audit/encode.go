package audit

import (
	"strconv"
	"time"
)

// appendRecord appends rec's line as encoding/json writes it (with SetEscapeHTML(false),
// without the newline), for the records the gate writes on every call: it reports false,
// having appended nothing, for what it leaves to encoding/json (arguments kept with
// RecordArgs, a string that needs escaping, a time encoding/json refuses).
// FuzzAppendRecord checks that what it writes is encoding/json's, byte for byte.
func appendRecord(b []byte, rec *Record) ([]byte, bool) {
	if rec.Args != nil || !plainRecord(rec) {
		return b, false
	}
	if y := rec.Time.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := rec.Time.Zone(); off%60 != 0 {
		return b, false
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, rec.Seq, 10)
	b = append(b, `,"time":"`...)
	b = rec.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","kind":"`...)
	b = append(b, rec.Kind...)
	b = append(b, `","prev":"`...)
	b = append(b, rec.Prev...)
	b = append(b, '"')
	if rec.Ref != 0 {
		b = append(b, `,"ref":`...)
		b = strconv.AppendUint(b, rec.Ref, 10)
	}
	b = str(b, `,"door":"`, string(rec.Door))
	if a := rec.Actor; a != nil {
		b = append(b, `,"actor":{`...)
		n := len(b)
		if a.PID != 0 {
			b = append(b, `"pid":`...)
			b = strconv.AppendInt(b, int64(a.PID), 10)
		}
		b = field(b, n, "exe", a.Exe)
		b = field(b, n, "session", a.Session)
		if a.Generation != 0 {
			b = comma(b, n)
			b = append(b, `"generation":`...)
			b = strconv.AppendUint(b, a.Generation, 10)
		}
		b = field(b, n, "room", a.Room)
		b = field(b, n, "host", a.Host)
		b = field(b, n, "mcpClient", a.MCPClient)
		b = append(b, '}')
	}
	if t := rec.Target; t != nil {
		b = append(b, `,"target":{"op":"`...)
		b = append(b, t.Op...)
		b = append(b, '"')
		b = str(b, `,"capability":"`, t.Capability)
		b = str(b, `,"action":"`, t.Action)
		b = str(b, `,"path":"`, t.Path)
		b = str(b, `,"adapter":"`, t.Adapter)
		b = append(b, '}')
	}
	b = str(b, `,"argsSha256":"`, rec.ArgsSHA256)
	if rec.ArgsBytes != 0 {
		b = append(b, `,"argsBytes":`...)
		b = strconv.AppendInt(b, int64(rec.ArgsBytes), 10)
	}
	b = str(b, `,"outcome":"`, rec.Outcome)
	if rec.DurationUS != 0 {
		b = append(b, `,"durationUs":`...)
		b = strconv.AppendInt(b, rec.DurationUS, 10)
	}
	b = str(b, `,"idempotencyKeySha256":"`, rec.IdempotencyKeySHA256)
	if s := rec.Segment; s != nil {
		b = append(b, `,"segment":{"number":`...)
		b = strconv.AppendUint(b, s.Number, 10)
		b = str(b, `,"first":"`, s.First)
		if s.Records != 0 {
			b = append(b, `,"records":`...)
			b = strconv.AppendUint(b, s.Records, 10)
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// str appends an omitempty string member, its key and opening quote in key.
func str(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, key...)
	b = append(b, v...)
	return append(b, '"')
}

// comma separates a member from the one before, unless it is the first after start.
func comma(b []byte, start int) []byte {
	if len(b) > start {
		b = append(b, ',')
	}
	return b
}

// field appends an omitempty string member of an object that began at start.
func field(b []byte, start int, key, v string) []byte {
	if v == "" {
		return b
	}
	b = comma(b, start)
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, `":"`...)
	b = append(b, v...)
	return append(b, '"')
}

// plainRecord reports whether every string of rec is printable ASCII that JSON writes as it
// is (no '"' or '\\'), so that appendRecord may copy them.
func plainRecord(rec *Record) bool {
	ok := plain(string(rec.Kind)) && plain(rec.Prev) && plain(string(rec.Door)) && plain(rec.ArgsSHA256) &&
		plain(rec.Outcome) && plain(rec.IdempotencyKeySHA256)
	if a := rec.Actor; ok && a != nil {
		ok = plain(a.Exe) && plain(a.Session) && plain(a.Room) && plain(a.Host) && plain(a.MCPClient)
	}
	if t := rec.Target; ok && t != nil {
		ok = plain(t.Op) && plain(t.Capability) && plain(t.Action) && plain(t.Path) && plain(t.Adapter)
	}
	if s := rec.Segment; ok && s != nil {
		ok = plain(s.First)
	}
	return ok
}

// plain reports whether s is printable ASCII without '"' or '\\'.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
