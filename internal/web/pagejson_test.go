package web

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/visible"
)

// showAll applies visible.Show to every string and object key of a decoded JSON value.
func showAll(v any) any {
	switch v := v.(type) {
	case string:
		return visible.Show(v)
	case []any:
		for i := range v {
			v[i] = showAll(v[i])
		}
		return v
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[visible.Show(k)] = showAll(e)
		}
		return m
	}
	return v
}

// TestPageJSON: every string the page receives, at any depth and in keys, has its hidden
// characters escaped; an answer without any is json.Marshal's, byte for byte.
func TestPageJSON(t *testing.T) {
	ap := []Approval{{ID: "ap-1", Room: "kitchen", Caller: hostB, Capability: "printer", Action: "print",
		Args: json.RawMessage(`{"text":"pay 10\u202e00001\u202c EUR","list":[{"k\u200b":"\u2066x\u2069"}],"n":1.50}`), Expires: time.Unix(0, 0).UTC()}}
	got, err := pageJSON(ap)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"id":"ap-1","room":"kitchen","caller":"` + hostB + `","capability":"printer","action":"print",` +
		`"args":{"text":"pay 10\u003cU+202E\u003e00001\u003cU+202C\u003e EUR","list":[{"k\u003cU+200B\u003e":"\u003cU+2066\u003ex\u003cU+2069\u003e"}],"n":1.50},` +
		`"expires":"1970-01-01T00:00:00Z"}]`
	if string(got) != want {
		t.Errorf("pageJSON\n got %s\nwant %s", got, want)
	}
	plain := Room{ID: "kitchen", Title: `Kitchen <b>"bold"</b> \ Grün`, Owner: hostA}
	got, err = pageJSON(plain)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := json.Marshal(plain); string(got) != string(m) {
		t.Errorf("pageJSON changed an answer with nothing to escape:\n got %s\nwant %s", got, m)
	}
	// An event's strings too (the call log).
	frame := string(formatEvent(Event{Kind: EventCall, Room: "r\u202e", Outcome: "ok"}))
	if !strings.Contains(frame, `"room":"r\u003cU+202E\u003e"`) || strings.ContainsRune(frame, '\u202e') {
		t.Errorf("event frame %q", frame)
	}
}

// FuzzPageJSON: whatever strings and raw JSON an answer holds, pageJSON gives valid JSON that
// decodes to the same value with visible.Show applied to every string and key, and holds no
// hidden character anywhere.
func FuzzPageJSON(f *testing.F) {
	f.Add("pay 10\u202e00001\u202c EUR", []byte(`{"a\u200b":["\u2028",1,null,{"b":"<U+0041>"}]}`))
	f.Add("", []byte(`"\\"`))
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		if !json.Valid(raw) {
			raw = []byte("null")
		}
		v := struct {
			S   string          `json:"s"`
			Raw json.RawMessage `json:"raw"`
		}{s, raw}
		got, err := pageJSON(v)
		if err != nil {
			t.Fatalf("pageJSON: %v", err)
		}
		if !json.Valid(got) {
			t.Fatalf("pageJSON wrote invalid JSON %q", got)
		}
		plain, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		// Numbers are compared as written: one past float64's range (1E700) is valid JSON,
		// which pageJSON keeps as it came.
		var want, have any
		if err := decodeNumbers(plain, &want); err != nil {
			t.Fatal(err)
		}
		if err := decodeNumbers(got, &have); err != nil {
			t.Fatal(err)
		}
		if want = showAll(want); !reflect.DeepEqual(have, want) {
			t.Fatalf("pageJSON(%q) decodes to %#v, want %#v", plain, have, want)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case string:
				if visible.Contains(v) {
					t.Fatalf("a hidden character in %q", v)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			case map[string]any:
				for k, e := range v {
					walk(k)
					walk(e)
				}
			}
		}
		walk(have)
	})
}

// decodeNumbers decodes b into v with its numbers as json.Number.
func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}
