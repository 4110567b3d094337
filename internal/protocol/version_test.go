package protocol

import (
	"math"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	max32 := strings.Repeat("9", 16) + "." + strings.Repeat("9", 15)
	tests := []struct {
		in           string
		ok           bool
		major, minor int
	}{
		{"1.0", true, 1, 0},
		{"2.0", true, 2, 0},
		{"2.7", true, 2, 7},
		{"1.99", true, 1, 99},
		{"0.9", true, 0, 9},
		{"0.0", true, 0, 0},
		{"10.20", true, 10, 20},
		{max32, true, 9999999999999999, 999999999999999},
		{max32 + "9", false, 0, 0}, // 33 characters
		{"1", false, 0, 0},
		{"1.", false, 0, 0},
		{".1", false, 0, 0},
		{".", false, 0, 0},
		{"", false, 0, 0},
		{"v1.0", false, 0, 0},
		{"01.0", true, -1, 0}, // a major with a leading zero is neither 1 nor 2
		{"02.0", true, -1, 0},
		{"99999999999999999999.0", true, -1, 0},
		{"1.00", true, 1, 0}, // the minor may have leading zeros, as in Pi Daemon
		{"1.01", true, 1, 1},
		{"2.007", true, 2, 7},
		{"1.0.0", false, 0, 0},
		{"1..0", false, 0, 0},
		{"+1.0", false, 0, 0},
		{"-1.0", false, 0, 0},
		{" 1.0", false, 0, 0},
		{"1.0 ", false, 0, 0},
		{"١.٠", false, 0, 0},                             // Arabic-Indic digits are not ASCII digits
		{"1.99999999999999999999", true, 1, math.MaxInt}, // saturates
	}
	for _, tt := range tests {
		v, ok := ParseVersion(tt.in)
		if ok != tt.ok {
			t.Errorf("ParseVersion(%q) ok = %v, want %v", tt.in, ok, tt.ok)
			continue
		}
		want := Version{}
		if tt.ok {
			want = Version{Major: tt.major, Minor: tt.minor, Raw: tt.in}
		}
		if v != want {
			t.Errorf("ParseVersion(%q) = %+v, want %+v", tt.in, v, want)
		}
	}
}

func TestSupportedVersions(t *testing.T) {
	for _, s := range SupportedVersions {
		v, ok := ParseVersion(s)
		if !ok || (v.Major != 1 && v.Major != 2) {
			t.Errorf("supported version %q does not parse as 1.x or 2.x", s)
		}
	}
	if len(SupportedVersions) != 2 || SupportedVersions[0] != Version1 || SupportedVersions[1] != Version2 {
		t.Errorf("SupportedVersions = %v", SupportedVersions)
	}
}
