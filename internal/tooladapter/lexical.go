package tooladapter

import "strings"

// Hand-written matchers for the patterns checked on every frame; regexp costs more than the
// rest of a frame's validation. lexical_test.go checks each against its regular expression.

func isAlnum(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
}

// validToken reports whether s has 1 to max bytes, starts with a letter or digit, and
// continues with letters, digits and bytes of extra: ^[A-Za-z0-9][A-Za-z0-9<extra>]*$.
func validToken(s string, max int, extra string) bool {
	if len(s) == 0 || len(s) > max || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// ValidAdapterCode reports whether s, an adapter's error code, matches ^[a-z][a-z0-9_]{0,127}$.
func ValidAdapterCode(s string) bool {
	if len(s) == 0 || len(s) > MaxErrorCodeLen || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validDigest reports whether s matches ^[a-f0-9]{64}$.
func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'f' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validSemver implements semverPattern.
func validSemver(s string) bool {
	for i := range 3 {
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 0 || (n > 1 && s[0] == '0') {
			return false
		}
		s = s[n:]
		if i < 2 {
			if len(s) == 0 || s[0] != '.' {
				return false
			}
			s = s[1:]
		}
	}
	ident := func(s string) int { // length of a [0-9A-Za-z.-]+ run
		n := 0
		for n < len(s) && (isAlnum(s[n]) || s[n] == '.' || s[n] == '-') {
			n++
		}
		return n
	}
	if len(s) > 0 && s[0] == '-' {
		n := ident(s[1:])
		if n == 0 {
			return false
		}
		s = s[1+n:]
	}
	if len(s) > 0 && s[0] == '+' {
		n := ident(s[1:])
		if n == 0 {
			return false
		}
		s = s[1+n:]
	}
	return s == ""
}
