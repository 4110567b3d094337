package room

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxToolNameLen bounds a tool name: the Chat Completions API and MCP clients allow 64 of
// [A-Za-z0-9_-].
const MaxToolNameLen = 64

// ToolName names an operation of a capability that provider published into a room, as an
// agent sees it — an agent session's model and an MCP client alike:
// room_<capability>_<action or "observe">, with the first 8 digits of the provider's id
// appended when ambiguous (two providers in the room publish the same capability id), and a
// digest of provider and capability in place of the capability when the name would exceed
// MaxToolNameLen. Characters a tool name cannot hold become '_'.
func ToolName(capabilityID string, provider HostID, op string, ambiguous bool) string {
	name := "room_" + toolToken(capabilityID) + "_" + op
	if ambiguous && len(provider) >= 8 {
		name += "_" + string(provider[:8])
	}
	if len(name) > MaxToolNameLen {
		sum := sha256.Sum256([]byte(string(provider) + "\x00" + capabilityID))
		name = "room_" + hex.EncodeToString(sum[:6]) + "_" + op
	}
	return name
}

func toolToken(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
