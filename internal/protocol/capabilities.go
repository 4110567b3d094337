package protocol

import "encoding/json"

// Bounds of the capability-adapter operations' payloads. The adapter protocol's own bounds
// (argument count and sizes, identifier grammars) are checked by the supervisor.
const (
	MaxAdapterNameLen = 64
	maxCommandLen     = 4096
)

// RegisterAdapterPayload is the payload of registerAdapter: an operator's approval to run
// command with args, without a shell, under name.
type RegisterAdapterPayload struct {
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
}

// Validate checks the envelope-level bounds.
func (p *RegisterAdapterPayload) Validate() *Error {
	if !validIdentifier(p.Name, MaxAdapterNameLen) {
		return invalidField("payload.name", "must be 1 to %d characters without control characters", MaxAdapterNameLen)
	}
	if p.Command == "" || len(p.Command) > maxCommandLen {
		return invalidField("payload.command", "must be 1 to %d bytes", maxCommandLen)
	}
	return nil
}

// AdapterNamePayload is the payload of removeAdapter and adapterLogs.
type AdapterNamePayload struct {
	Name string `json:"name"`
}

// Validate checks the name's bounds.
func (p *AdapterNamePayload) Validate() *Error {
	if !validIdentifier(p.Name, MaxAdapterNameLen) {
		return invalidField("payload.name", "must be 1 to %d characters without control characters", MaxAdapterNameLen)
	}
	return nil
}

// CapabilityPayload is the payload of describeCapability and observeCapability.
type CapabilityPayload struct {
	CapabilityID string `json:"capabilityId"`
}

// InvokeCapabilityPayload is the payload of invokeCapability. Args is checked against the
// action's declared input before the adapter sees it.
type InvokeCapabilityPayload struct {
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action"`
	Args         json.RawMessage `json:"args,omitempty"`
}

// MaxToolCallIDLen bounds invokeTool's toolCallId.
const MaxToolCallIDLen = 128

// InvokeToolPayload is the payload of invokeTool (2.x): one call of a granted host tool
// operation. The idempotency key sent to the adapter derives from operation and toolCallId, so
// a retry of the same call reuses it.
type InvokeToolPayload struct {
	ToolCallID string          `json:"toolCallId"`
	Operation  string          `json:"operation"`
	Arguments  json.RawMessage `json:"arguments"`
}

// Validate checks the envelope-level rules; the operation's own payload rules are the
// tool-adapter layer's.
func (p *InvokeToolPayload) Validate() *Error {
	if !validIdentifier(p.ToolCallID, MaxToolCallIDLen) {
		return invalidField("payload.toolCallId", "must be 1 to %d characters without control characters", MaxToolCallIDLen)
	}
	if p.Operation == "" {
		return invalidField("payload.operation", "is required")
	}
	if len(p.Arguments) == 0 || p.Arguments[0] != '{' {
		return invalidField("payload.arguments", "must be an object")
	}
	return nil
}

// ToolResult is the data of invokeTool: the adapter's typed result for the operation.
type ToolResult struct {
	ToolCallID string          `json:"toolCallId"`
	Operation  string          `json:"operation"`
	Data       json.RawMessage `json:"data"`
}
