package protocol

import (
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

// ParseVersion parses "<major>.<minor>" where both parts are decimal numbers without leading
// zeros. It does not check that the major is supported.
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
	if (dot > 1 && s[0] == '0') || (len(s)-dot > 2 && s[dot+1] == '0') {
		return Version{}, false
	}
	major, err1 := strconv.Atoi(s[:dot])
	minor, err2 := strconv.Atoi(s[dot+1:])
	if err1 != nil || err2 != nil {
		return Version{}, false
	}
	return Version{Major: major, Minor: minor, Raw: s}, true
}
