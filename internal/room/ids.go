package room

import (
	"github.com/airlockhq/airlock/internal/ndjson"
)

// Grammars of the names a call carries. Room ids and host ids are also subject tokens of the
// bus, so neither may hold '.', '*', '>' or white space. Each grammar is a first-byte class, a
// class for the rest and a length bound; they are matched by hand because they run several
// times on every call (ids_test.go holds them equal to the regular expressions below).
//
//	room id      ^[a-z0-9][a-z0-9_-]{0,63}$
//	capability   ^[a-z0-9][a-z0-9._:-]{0,63}$
//	action       ^[a-z][a-z0-9_-]{0,31}$
//	request id   ^[A-Za-z0-9._:-]{1,64}$
//	error code   ^[a-z][a-z_]{0,31}$
//	host id      ^[0-9a-f]{64}$ (exactly 64)

func lower(c byte) bool { return 'a' <= c && c <= 'z' }
func digit(c byte) bool { return '0' <= c && c <= '9' }

func roomFirst(c byte) bool { return lower(c) || digit(c) }
func roomRest(c byte) bool  { return lower(c) || digit(c) || c == '_' || c == '-' }
func capRest(c byte) bool {
	return lower(c) || digit(c) || c == '.' || c == '_' || c == ':' || c == '-'
}
func actionRest(c byte) bool   { return lower(c) || digit(c) || c == '_' || c == '-' }
func requestByte(c byte) bool  { return capRest(c) || ('A' <= c && c <= 'Z') }
func codeRest(c byte) bool     { return lower(c) || c == '_' }
func hexLowerByte(c byte) bool { return digit(c) || ('a' <= c && c <= 'f') }

// matchName reports whether s is 1 to max bytes, the first in first and the rest in rest.
func matchName(s string, max int, first, rest func(byte) bool) bool {
	if len(s) == 0 || len(s) > max || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

// validCode reports whether s follows the grammar of an error code on the wire.
func validCode(s string) bool { return matchName(s, 32, lower, codeRest) }

// ValidRoomID reports whether id is a room id: 1–64 of [a-z0-9_-], starting with a letter or
// digit.
func ValidRoomID(id string) bool { return matchName(id, 64, roomFirst, roomRest) }

// ValidCapabilityID reports whether id follows the capability adapter protocol's grammar.
func ValidCapabilityID(id string) bool { return matchName(id, 64, roomFirst, capRest) }

// ValidAction reports whether name follows the capability adapter protocol's action grammar.
func ValidAction(name string) bool { return matchName(name, 32, lower, actionRest) }

// ValidRequestID reports whether id is a call's request id: 1–64 of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool { return matchName(id, 64, requestByte, requestByte) }

// CallSubject is the bus subject of calls to provider in room. A provider serves it for each
// room it is in; broker permissions per host (docs/fabric.md) confine each host to the rooms
// it is a member of and to its own provider subjects.
func CallSubject(room string, provider HostID) string {
	return "airlock.room." + room + ".call." + string(provider)
}

// roomOfSubject returns the room token of a call subject.
func roomOfSubject(subject string) string {
	const prefix = "airlock.room."
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return ""
	}
	rest := subject[len(prefix):]
	for i := 0; i < len(rest); i++ {
		if rest[i] == '.' {
			return rest[:i]
		}
	}
	return ""
}

// marshal encodes v as compact JSON without HTML escaping, so that a json.RawMessage member
// travels exactly as AppendCompact leaves it, which is what digests and signatures cover.
func marshal(v any) ([]byte, error) {
	b, err := ndjson.Marshal(v)
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}
