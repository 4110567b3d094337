package audit

import (
	"bytes"
	"testing"
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
