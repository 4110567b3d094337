package roomhost

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/turn"
)

// AgentTools returns the capabilities visible in room id as an agent session's tools: an
// observe tool for each published observation and a tool for each published action, named
// and described from the provider's catalog, with the action's declared input as parameters.
// Every call is a room call of this host, authorized by the provider like any other.
func (s *Service) AgentTools(id string) turn.RoomTools { return &agentTools{s: s, room: id} }

type agentTools struct {
	s    *Service
	room string
}

// toolName names a capability operation as every agent surface does (room.ToolName).
func toolName(c Capability, op string, ambiguous bool) string {
	return room.ToolName(c.CapabilityID, c.Provider, op, ambiguous)
}

func (a *agentTools) Tools(ctx context.Context) []turn.RoomTool {
	caps, err := a.s.Capabilities(ctx, a.room)
	if err != nil {
		return nil
	}
	count := map[string]int{}
	for _, c := range caps {
		count[c.CapabilityID]++
	}
	var out []turn.RoomTool
	for _, c := range caps {
		ambiguous := count[c.CapabilityID] > 1
		where := "in room " + a.room
		if !c.ProviderSelf {
			where += ", provided by host " + string(c.Provider[:12])
		}
		if !c.Available {
			// The tool stays: a call fails unavailable until the provider is back.
			where += "; unavailable now: " + c.UnavailableReason
		}
		title := c.Title
		if title == "" {
			title = c.CapabilityID
		}
		if c.Observe {
			out = append(out, turn.RoomTool{
				Tool: model.Tool{Name: toolName(c, "observe", ambiguous), Description: "Observe " + title + " (" + where + ").",
					Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
				Room: a.room, Provider: string(c.Provider), Capability: c.CapabilityID,
			})
		}
		for _, act := range c.Actions {
			desc := title + ": " + act.Title + " (" + where + ")."
			if act.ApproveEach {
				desc += " Each call waits for the provider's operator to approve it."
			}
			out = append(out, turn.RoomTool{
				Tool: model.Tool{Name: toolName(c, act.Name, ambiguous), Description: desc, Parameters: parameters(act.Input)},
				Room: a.room, Provider: string(c.Provider), Capability: c.CapabilityID, Action: act.Name,
			})
		}
	}
	slices.SortStableFunc(out, func(x, y turn.RoomTool) int { return strings.Compare(x.Tool.Name, y.Tool.Name) })
	return slices.CompactFunc(out, func(x, y turn.RoomTool) bool { return x.Tool.Name == y.Tool.Name })
}

// parameters turns a descriptor's closed input ({type, properties: name → primitive type,
// required}) into the JSON Schema of a tool's parameters.
func parameters(input json.RawMessage) json.RawMessage {
	var in struct {
		Properties map[string]string `json:"properties"`
		Required   []string          `json:"required"`
	}
	_ = json.Unmarshal(input, &in)
	props := make(map[string]any, len(in.Properties))
	for name, typ := range in.Properties {
		props[name] = map[string]string{"type": typ}
	}
	schema := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(in.Required) > 0 {
		schema["required"] = in.Required
	}
	return marshal(schema)
}

func (a *agentTools) Call(ctx context.Context, t turn.RoomTool, args json.RawMessage) (json.RawMessage, *protocol.Error) {
	var res json.RawMessage
	var err error
	if t.Action == "" {
		res, err = a.s.Observe(ctx, t.Room, t.Provider, t.Capability)
	} else {
		res, err = a.s.Invoke(ctx, t.Room, t.Provider, t.Capability, t.Action, args)
	}
	if err != nil {
		e := &protocol.Error{Code: room.CodeInternal, Message: "internal error"}
		if re, ok := asError(err).(*Error); ok {
			e.Code, e.Message = re.code, re.msg
			e.Retryable = re.code == room.CodeUnavailable || re.code == room.CodeBusy || re.code == room.CodeTimeout
		}
		return nil, e
	}
	return res, nil
}

// InRoom reports whether this host is in room id.
func (s *Service) InRoom(id string) bool {
	_, err := s.record(id)
	return err == nil
}
