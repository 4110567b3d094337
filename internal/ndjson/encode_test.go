package ndjson

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestMarshal(t *testing.T) {
	type rec struct {
		Text string `json:"text"`
		N    int    `json:"n"`
	}
	tests := []struct {
		name string
		in   rec
		want string
	}{
		{"plain", rec{"hi", 1}, `{"text":"hi","n":1}` + "\n"},
		{"HTML characters are not escaped", rec{"<a href='x'>&</a>", 2}, `{"text":"<a href='x'>&</a>","n":2}` + "\n"},
		{"line breaks inside strings are escaped", rec{"a\nb\r\nc", 3}, `{"text":"a\nb\r\nc","n":3}` + "\n"},
		{"line and paragraph separators are escaped", rec{"a\u2028b\u2029c", 4}, `{"text":"a\u2028b\u2029c","n":4}` + "\n"},
		{"non-ASCII is kept", rec{"héllo ✓", 5}, `{"text":"héllo ✓","n":5}` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Marshal = %q, want %q", got, tt.want)
			}
			if bytes.Count(got, []byte("\n")) != 1 || bytes.ContainsRune(got, '\r') {
				t.Errorf("Marshal = %q, want exactly one line", got)
			}

			// What Marshal writes, the Reader frames and Decode takes back unchanged.
			r := NewReader(bytes.NewReader(got), len(got))
			line, err := r.Next()
			if err != nil {
				t.Fatalf("Reader: %v", err)
			}
			var back rec
			if err := Decode(line, &back, Closed); err != nil || back != tt.in {
				t.Errorf("round trip gave %+v, %v", back, err)
			}
			if _, err := r.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("after the line: %v", err)
			}
		})
	}
}

func TestMarshalUnsupported(t *testing.T) {
	if got, err := Marshal(make(chan int)); err == nil || got != nil {
		t.Errorf("Marshal(chan) = %q, %v; want an error", got, err)
	}
}
