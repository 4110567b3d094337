package room

import (
	"regexp"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Grammars of the names a call carries. Room ids and host ids are also subject tokens of the
// bus, so neither may hold '.', '*', '>' or white space.
var (
	roomIDPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	capabilityPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,63}$`)
	actionPattern     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	requestIDPattern  = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	codePattern       = regexp.MustCompile(`^[a-z][a-z_]{0,31}$`)
)

// ValidRoomID reports whether id is a room id: 1–64 of [a-z0-9_-], starting with a letter or
// digit.
func ValidRoomID(id string) bool { return roomIDPattern.MatchString(id) }

// ValidCapabilityID reports whether id follows the capability adapter protocol's grammar.
func ValidCapabilityID(id string) bool { return capabilityPattern.MatchString(id) }

// ValidAction reports whether name follows the capability adapter protocol's action grammar.
func ValidAction(name string) bool { return actionPattern.MatchString(name) }

// ValidRequestID reports whether id is a call's request id: 1–64 of [A-Za-z0-9._:-].
func ValidRequestID(id string) bool { return requestIDPattern.MatchString(id) }

// CallSubject is the bus subject of calls to provider in room. A provider serves
// "airlock.room.*.call.<its id>"; broker permissions per host (issue #14) can confine each
// host to the rooms it is a member of and to its own provider subject.
func CallSubject(room string, provider HostID) string {
	return "airlock.room." + room + ".call." + string(provider)
}

// providerSubject is the subject pattern a provider serves.
func providerSubject(provider HostID) string { return "airlock.room.*.call." + string(provider) }

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
