package audit

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/visible"
)

// FuzzDecodeRecord: any line either is refused or decodes to a record whose encoding decodes
// back to the same encoding.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"seq":1,"time":"2026-12-06T01:00:00Z","kind":"header","prev":"","segment":{"number":1}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := DecodeRecord(line)
		if err != nil {
			return
		}
		enc, err := encode(&rec)
		if err != nil {
			return // a decoded record may be too large once re-escaped
		}
		again, err := DecodeRecord(bytes.TrimSuffix(enc, []byte("\n")))
		if err != nil {
			t.Fatalf("a decoded record does not decode once encoded: %v\n%s", err, enc)
		}
		enc2, err := encode(&again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzReadSegment: any bytes read as a segment end in whole records, a torn tail or a broken
// link, never a panic, and the records it accepts are chained.
func FuzzReadSegment(f *testing.F) {
	f.Add([]byte("{\"seq\":1,\"time\":\"2026-12-06T01:00:00Z\",\"kind\":\"header\",\"prev\":\"\",\"segment\":{\"number\":1}}\n{\"seq\":2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var last uint64
		info, err := readSegment(bytes.NewReader(data), 1, 0, "", func(rec *Record, _ string, _ int64) error {
			if last != 0 && rec.Seq != last+1 {
				t.Fatalf("accepted seq %d after %d", rec.Seq, last)
			}
			last = rec.Seq
			return nil
		})
		if info.size+info.torn > int64(len(data)) {
			t.Fatalf("size %d + torn %d > %d", info.size, info.torn, len(data))
		}
		if err == nil && info.size+info.torn != int64(len(data)) {
			t.Fatalf("accepted %d+%d of %d bytes", info.size, info.torn, len(data))
		}
		if err == nil && info.records > 0 && (info.header == nil || info.end != last) {
			t.Fatalf("info %+v, last %d", info, last)
		}
	})
}

// FuzzCheckText: checkText's ASCII fast path accepts exactly what the full check does: a
// string within its bound is refused iff it is not UTF-8 or holds a visible.Hidden rune.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"", "notes/todo.md", "a\x00b", "tab\there", "del\x7f", "ünïcode", "zw\u200bsp", "\xff", "~ !\"#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := checkText("f", s, 1<<20) == nil
		want := len(s) <= 1<<20 && utf8.ValidString(s) && !visible.Contains(s)
		if got != want {
			t.Fatalf("checkText(%q) accepts: %v, want %v", s, got, want)
		}
	})
}

// FuzzAppendRecord: where appendRecord writes a record, it writes exactly what
// encoding/json writes (the format, and what the chain's digests are over); where it does
// not, it appends nothing.
func FuzzAppendRecord(f *testing.F) {
	f.Add(uint64(7), int64(1765000000123456789), "outcome", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", uint64(6), "owner",
		true, 4242, "/usr/bin/airlock", "s-1", uint64(3), "", "", "claude-code",
		true, "fs.write", "", "", "notes/todo.md", "", "", 0, false, "ok", int64(1500), "", false, uint64(0), "", uint64(0))
	f.Add(uint64(1), int64(0), "header", "", uint64(0), "", false, 0, "", "", uint64(0), "", "", "",
		false, "", "", "", "", "", "", 0, false, "", int64(0), "", true, uint64(1), "", uint64(0))
	f.Add(uint64(99), int64(-62135596800000000000/1000), "footer", "ab", uint64(0), "daemon", true, 0, "", "", uint64(0), "home", "hostB", "",
		true, "room.call.provided", "lamp", "set_power", "a \"quoted\" \\ path", "ad", "digest", 12, true, "denied", int64(0), "k", true, uint64(3), "first", uint64(40))
	f.Fuzz(func(t *testing.T, seq uint64, nanos int64, kind, prev string, ref uint64, door string,
		hasActor bool, pid int, exe, session string, gen uint64, room, host, client string,
		hasTarget bool, op, capability, action, path, adapter string,
		argsSHA string, argsBytes int, hasArgs bool, outcome string, dur int64, key string,
		hasSegment bool, number uint64, first string, records uint64) {
		rec := Record{Seq: seq, Time: time.Unix(0, nanos).UTC(), Kind: Kind(kind), Prev: prev, Ref: ref, Door: Door(door),
			ArgsSHA256: argsSHA, ArgsBytes: argsBytes, Outcome: outcome, DurationUS: dur, IdempotencyKeySHA256: key}
		if nanos%3 == 0 {
			rec.Time = rec.Time.In(time.FixedZone("x", int(nanos%86400)))
		}
		if hasActor {
			rec.Actor = &Actor{PID: pid, Exe: exe, Session: session, Generation: gen, Room: room, Host: host, MCPClient: client}
		}
		if hasTarget {
			rec.Target = &Target{Op: op, Capability: capability, Action: action, Path: path, Adapter: adapter}
		}
		if hasArgs {
			rec.Args = json.RawMessage(`{"a":1}`)
		}
		if hasSegment {
			rec.Segment = &SegmentMark{Number: number, First: first, Records: records}
		}
		got, ok := appendRecord([]byte("x"), &rec)
		if !ok {
			if string(got) != "x" {
				t.Fatalf("appendRecord declined and appended %q", got[1:])
			}
			return
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&rec); err != nil {
			t.Fatalf("appendRecord wrote %s; encoding/json refuses: %v", got[1:], err)
		}
		if want := bytes.TrimSuffix(b.Bytes(), []byte("\n")); !bytes.Equal(got[1:], want) {
			t.Fatalf("appendRecord wrote\n%s\nencoding/json\n%s", got[1:], want)
		}
	})
}

// FuzzCanonical: where canonicalFast takes a value ndjson.Valid accepted, its canonical form
// is encoding/json's, byte for byte (what argsSha256 digests).
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{`{"path":"notes/todo.md","content":"buy milk","create":true}`, `{"b":1,"a":[1,2.50,{"d":null,"c":false}],"ab":-0.1e+5}`,
		` { "a" : "x" , "a!" : [ ] , "A" : { } } `, `{"k":"caf\u00e9","e":"\n"}`, `"é"`, `[1,"a\\b"]`, `{"a":1,"a":2}`, `12`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if ndjson.Valid(raw) != nil {
			return
		}
		fast, ok := canonicalFast(raw)
		if !ok {
			return
		}
		want, err := canonicalJSON(raw)
		if err != nil {
			t.Fatalf("canonicalFast took %q, which encoding/json refuses: %v", raw, err)
		}
		if !bytes.Equal(fast, want) {
			t.Fatalf("canonical form of %q:\nfast %s\njson %s", raw, fast, want)
		}
	})
}
