package protocol

import (
	"math"
	"strconv"
)

// Protocol versions this host speaks.
const (
	Version1 = "1.0"
	Version2 = "2.0"
)

// SupportedVersions lists the versions a 2.x handshake advertises.
var SupportedVersions = []string{Version1, Version2}

// maxVersionLen bounds the version string before it is parsed.
const maxVersionLen = 32

// Version is a parsed "<major>.<minor>" protocol version. Raw is the exact text the client sent,
// which every response echoes, including minors this host does not know (such as "2.7").
type Version struct {
	Major, Minor int
	Raw          string
}

// V2 reports whether the version is 2.x.
func (v Version) V2() bool { return v.Major == 2 }

// ParseVersion parses "<major>.<minor>": at most 32 characters, both parts ASCII decimal
// digits. It does not check that the major is supported. As in Pi Daemon, the minor may have
// leading zeros and any number of digits ("1.00", "2.007"); a minor too large for an int reads
// as the largest int. A major written with a leading zero ("01.0") or too large for an int has
// Major -1, so that it is neither 1 nor 2: the versions' JSON Schemas spell the majors "1" and
// "2" exactly.
func ParseVersion(s string) (Version, bool) {
	if len(s) == 0 || len(s) > maxVersionLen {
		return Version{}, false
	}
	dot := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.' && dot < 0:
			dot = i
		case c >= '0' && c <= '9':
		default:
			return Version{}, false
		}
	}
	if dot <= 0 || dot == len(s)-1 {
		return Version{}, false
	}
	major, ok := atoiSaturating(s[:dot])
	if !ok || (dot > 1 && s[0] == '0') {
		major = -1
	}
	minor, _ := atoiSaturating(s[dot+1:])
	return Version{Major: major, Minor: minor, Raw: s}, true
}

// atoiSaturating reads a string of ASCII digits; past the range of an int it returns the
// largest int and false.
func atoiSaturating(digits string) (int, bool) {
	n, err := strconv.Atoi(digits)
	if err != nil {
		return math.MaxInt, false
	}
	return n, true
}
