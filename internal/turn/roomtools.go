package turn

import (
	"context"
	"encoding/json"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Operations of room tools, as tool events name them.
const (
	OpRoomObserve = "room.observe"
	OpRoomInvoke  = "room.invoke"
)

// RoomTool is one capability operation of a room offered to the model: its tool definition
// and the call it makes. Action is empty for an observation.
type RoomTool struct {
	Tool       model.Tool
	Room       string
	Provider   string
	Capability string
	Action     string
}

// RoomTools are the capabilities published into a session's room, as tools. Every call goes
// through the room's authorization at the provider, exactly as a call from the owner's socket
// would; what the model is offered is discovery only.
type RoomTools interface {
	// Tools lists the room's tools now.
	Tools(ctx context.Context) []RoomTool
	// Call runs one of them with the model's arguments.
	Call(ctx context.Context, t RoomTool, args json.RawMessage) (json.RawMessage, *protocol.Error)
}

// roomCall names the room call of a tool event.
type roomCall struct {
	Room       string `json:"room"`
	Provider   string `json:"provider"`
	Capability string `json:"capabilityId"`
	Action     string `json:"action,omitempty"`
}

func (t *RoomTool) operation() string {
	if t.Action == "" {
		return OpRoomObserve
	}
	return OpRoomInvoke
}

func (t *RoomTool) call() *roomCall {
	return &roomCall{Room: t.Room, Provider: t.Provider, Capability: t.Capability, Action: t.Action}
}

func findRoomTool(tools []RoomTool, name string) *RoomTool {
	for i := range tools {
		if tools[i].Tool.Name == name {
			return &tools[i]
		}
	}
	return nil
}

// HostTools are tools the daemon serves a turn itself, beside the granted operations and the
// room's: the adapter proposal tools (internal/daemon, proposals.go). A tool's name is the
// operation its events name.
type HostTools interface {
	// Tools lists the tools now.
	Tools() []model.Tool
	// Call runs the tool called name with the model's arguments (a JSON object); its result
	// is what the model reads.
	Call(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, *protocol.Error)
}
