package model

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2015, 10, 21, 7, 27, 50, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{" 12 ", 12 * time.Second},
		{"-5", 0},
		{"86401", 24 * time.Hour},
		{"9223372036854775807", 24 * time.Hour},
		{"99999999999999999999", 0}, // not an int64, not a date
		{"Wed, 21 Oct 2015 07:28:00 GMT", 10 * time.Second},
		{"Wednesday, 21-Oct-15 07:28:00 GMT", 10 * time.Second},
		{"Wed, 21 Oct 2015 07:00:00 GMT", 0},
		{"Wed, 21 Oct 2099 07:28:00 GMT", 24 * time.Hour},
		{"1.5", 0},
		{"soon", 0},
	}
	for _, tc := range cases {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCleanProviderText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"  plain  ", "plain"},
		{"a\nb\r\tc\x00d\x7fe\u0085f", "a b  c d e f"},
		{"bad \xff utf8", "bad   utf8"},
		{strings.Repeat("a", 512), strings.Repeat("a", 512)},
		{strings.Repeat("a", 513), strings.Repeat("a", 512) + "…"},
		{"a" + strings.Repeat("€", 200), "a" + strings.Repeat("€", 170) + "…"},
	}
	for _, tc := range cases {
		if got := cleanProviderText(tc.in); got != tc.want {
			t.Errorf("cleanProviderText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestScrubBeforeTruncate pins the order: a key straddling the truncation point must not
// leave its first bytes behind.
func TestScrubBeforeTruncate(t *testing.T) {
	s := scrubber{key: "sk-0123456789abcdef"}
	e := s.statusError(400, 0, strings.Repeat("x", 505)+s.key, false)
	if strings.Contains(e.Message, "sk-0") || strings.Contains(e.Error(), "sk-0") {
		t.Fatalf("key prefix left in %q", e.Message)
	}
	cause := errors.New("echo " + s.key)
	e = s.newError(CodeUnavailable, true, 0, "msg "+s.key, cause)
	if strings.Contains(e.Error(), s.key) || strings.Contains(e.Unwrap().Error(), s.key) || errors.Unwrap(e.Unwrap()) != nil {
		t.Fatalf("key left in %q / %q", e.Error(), e.Unwrap())
	}
	plain := errors.New("no secret")
	if e := s.newError(CodeUnavailable, true, 0, "msg", plain); e.Unwrap() != plain {
		t.Fatalf("a clean cause was replaced")
	}
	if CodeOf(e) != CodeUnavailable || CodeOf(plain) != "" || CodeOf(nil) != "" {
		t.Fatal("CodeOf")
	}
}

func TestLimitedReader(t *testing.T) {
	for _, n := range []int64{0, 1, 5, 10, 11} {
		body := strings.Repeat("x", 10)
		for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body))} {
			got, err := io.ReadAll(&limitedReader{r: r, n: n})
			if n >= 10 {
				if err != nil || string(got) != body {
					t.Fatalf("n=%d: %q, %v", n, got, err)
				}
			} else if !errors.Is(err, errTooLarge) || int64(len(got)) > n+1 {
				t.Fatalf("n=%d: %d bytes, %v", n, len(got), err)
			}
		}
	}
	got, err := io.ReadAll(&limitedReader{r: strings.NewReader("abc"), n: 1<<63 - 1})
	if err != nil || string(got) != "abc" {
		t.Fatalf("huge limit: %q, %v", got, err)
	}
}
