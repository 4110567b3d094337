package protocol

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Room operations (2.x): the owner's surface of the host's room service.
const (
	OpRoomStatus = "roomStatus"
	OpCreateRoom = "createRoom"
	OpListRooms  = "listRooms"
	OpShowRoom   = "showRoom"
	OpCloseRoom  = "closeRoom"
	OpInviteRoom = "inviteRoom"
	OpJoinRoom   = "joinRoom"
	// OpRemoveRoomMember takes one member out of a room this host owns.
	OpRemoveRoomMember      = "removeRoomMember"
	OpPublishCapability     = "publishCapability"
	OpUnpublishCapability   = "unpublishCapability"
	OpListRoomCapabilities  = "listRoomCapabilities"
	OpObserveRoomCapability = "observeRoomCapability"
	OpInvokeRoomCapability  = "invokeRoomCapability"
	OpListApprovals         = "listApprovals"
	OpDecideApproval        = "decideApproval"
	// OpRoomUILogin mints a one-time login URL for the host's web page (airlockd --http).
	OpRoomUILogin = "roomUILogin"
	// OpFabricStatus reports the embedded room bus node: its fabric's routes, leaves and
	// JetStream health, or the single local node (airlock fabric status).
	OpFabricStatus = "fabricStatus"
	// OpAdmitBusHost admits another daemon of the same user to this host's embedded room bus
	// (airlockd --nats-via calls it at start and whenever its rooms change) and answers the
	// bus's URL.
	OpAdmitBusHost = "admitBusHost"
	// OpListBusHosts lists the hosts admitted to this host's embedded room bus.
	OpListBusHosts = "listBusHosts"
	// OpRemoveBusHost removes an admitted host from this host's embedded room bus.
	OpRemoveBusHost = "removeBusHost"
)

// Approval queue operations (2.x) beside listApprovals and decideApproval, which list and
// decide every request of the daemon's approval queue (not only room calls).
const (
	// OpListRememberedApprovals lists the remembered approvals.
	OpListRememberedApprovals = "listRememberedApprovals"
	// OpForgetApproval revokes a remembered approval.
	OpForgetApproval = "forgetApproval"
)

// approvalOperations are the approval queue's own operations in handshake order.
var approvalOperations = []string{OpListRememberedApprovals, OpForgetApproval}

// EventApproval is the event a session's attached clients get when a call of that session
// generation starts waiting for the operator, is decided, times out, or is answered by a
// remembered approval; and when a remembered approval of it is stored or forgotten.
const EventApproval = "approval"

// roomOperations are the room operations in handshake order.
var roomOperations = []string{
	OpRoomStatus, OpCreateRoom, OpListRooms, OpShowRoom, OpCloseRoom, OpInviteRoom, OpJoinRoom,
	OpRemoveRoomMember, OpPublishCapability, OpUnpublishCapability, OpListRoomCapabilities,
	OpObserveRoomCapability, OpInvokeRoomCapability, OpListApprovals, OpDecideApproval,
	OpRoomUILogin, OpFabricStatus, OpAdmitBusHost, OpListBusHosts, OpRemoveBusHost,
}

// Bounds and grammars of the room operations' payloads: the room layer's rules
// (internal/room), copied because this package must not import it.
const (
	// MaxRoomIDLen bounds a room id, in bytes (the id grammar is ASCII).
	MaxRoomIDLen = 64
	// MaxRoomTitleBytes bounds a room title and a member's display name.
	MaxRoomTitleBytes = 128
	// MaxRoomArgsBytes bounds invokeRoomCapability's args: the room edge's bound.
	MaxRoomArgsBytes = 8 << 10
	// MaxJoinCodeLen bounds a join code.
	MaxJoinCodeLen = 256
	// MaxPublicationActions bounds a publication's named actions.
	MaxPublicationActions = 8
	// MaxPublicationMembers bounds a publication's named members.
	MaxPublicationMembers = 64
	// MaxBusHostRooms bounds admitBusHost's rooms: the store's bound on a host's rooms.
	MaxBusHostRooms = 256
)

var (
	// roomIDPattern is the room id grammar (internal/room); registerAdapter's room uses it too.
	roomIDPattern     = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	hostIDPattern     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	approvalIDPattern = regexp.MustCompile(`^[0-9a-f]{24}$`)
	// nkeyPattern is an nkey user public key: "U" and 55 base32 characters.
	nkeyPattern = regexp.MustCompile(`^U[A-Z2-7]{55}$`)
)

func validRoomID(field, id string) *Error {
	if !roomIDPattern.MatchString(id) {
		return invalidField(field, "must match %s", roomIDPattern.String())
	}
	return nil
}

func validHostID(field, id string) *Error {
	if !hostIDPattern.MatchString(id) {
		return invalidField(field, "must be a host id, 64 lowercase hex digits")
	}
	return nil
}

func validRoomText(field, s string) *Error {
	if len(s) > MaxRoomTitleBytes || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool {
		return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)
	}) {
		return invalidField(field, "must be at most %d bytes of UTF-8 without control characters", MaxRoomTitleBytes)
	}
	return nil
}

// RoomPayload names a room: the payload of showRoom, closeRoom and listRoomCapabilities.
type RoomPayload struct {
	Room string `json:"room"`
}

// Validate checks the room id grammar.
func (p *RoomPayload) Validate() *Error { return validRoomID("payload.room", p.Room) }

// CreateRoomPayload is the payload of createRoom. An empty title means the id.
type CreateRoomPayload struct {
	Room  string `json:"room"`
	Title string `json:"title,omitempty"`
}

// Validate checks the id grammar and the title bound.
func (p *CreateRoomPayload) Validate() *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	return validRoomText("payload.title", p.Title)
}

// InviteRoomPayload is the payload of inviteRoom: the room, and the display name the joiner
// gets in its roster.
type InviteRoomPayload struct {
	Room string `json:"room"`
	Name string `json:"name,omitempty"`
}

// Validate checks the id grammar and the name bound.
func (p *InviteRoomPayload) Validate() *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	return validRoomText("payload.name", p.Name)
}

// RoomMemberPayload names a member of a room: the payload of removeRoomMember.
type RoomMemberPayload struct {
	Room   string `json:"room"`
	HostID string `json:"hostId"`
}

// Validate checks the room id and host id grammars.
func (p *RoomMemberPayload) Validate() *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	return validHostID("payload.hostId", p.HostID)
}

// JoinRoomPayload is the payload of joinRoom. The code is a bearer secret: it is never
// echoed in an error or logged.
type JoinRoomPayload struct {
	Code string `json:"code"`
}

// Validate checks that a code is present and bounded; its form is the room service's to
// check (invalid_join_code).
func (p *JoinRoomPayload) Validate() *Error {
	if p.Code == "" || len(p.Code) > MaxJoinCodeLen {
		return invalidField("payload.code", "must be 1 to %d bytes", MaxJoinCodeLen)
	}
	return nil
}

// PublishCapabilityPayload is the payload of publishCapability: a local capability into a
// room, with all its actions (actions absent or empty) or the named ones, observe on or off,
// for every member (members absent or empty) or the named hosts, and optionally a per-call
// approval of every invoke by another host.
type PublishCapabilityPayload struct {
	Room         string   `json:"room"`
	CapabilityID string   `json:"capabilityId"`
	Actions      []string `json:"actions,omitempty"`
	Observe      bool     `json:"observe,omitempty"`
	Members      []string `json:"members,omitempty"`
	ApproveEach  bool     `json:"approveEach,omitempty"`
}

// Validate checks the grammars and bounds; whether the capability, its actions and the
// members exist is the room service's to say.
func (p *PublishCapabilityPayload) Validate() *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	if e := validCapabilityID(p.CapabilityID); e != nil {
		return e
	}
	if len(p.Actions) > MaxPublicationActions {
		return invalidField("payload.actions", "must have at most %d items", MaxPublicationActions)
	}
	for _, a := range p.Actions {
		if !actionNameGrammar(a) {
			return invalidField("payload.actions", "items must match %s", actionNamePattern.String())
		}
	}
	if len(p.Members) > MaxPublicationMembers {
		return invalidField("payload.members", "must have at most %d items", MaxPublicationMembers)
	}
	for _, m := range p.Members {
		if e := validHostID("payload.members", m); e != nil {
			return e
		}
	}
	return nil
}

// RoomCapabilityPayload names a local capability in a room: the payload of
// unpublishCapability.
type RoomCapabilityPayload struct {
	Room         string `json:"room"`
	CapabilityID string `json:"capabilityId"`
}

// Validate checks the grammars.
func (p *RoomCapabilityPayload) Validate() *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	return validCapabilityID(p.CapabilityID)
}

// RoomCallPayload is the payload of observeRoomCapability and invokeRoomCapability: a call,
// as this host, to a capability a provider published into a room. Action and args are for
// invoke; absent args mean {}.
type RoomCallPayload struct {
	Room         string          `json:"room"`
	Provider     string          `json:"provider"`
	CapabilityID string          `json:"capabilityId"`
	Action       string          `json:"action,omitempty"`
	Args         json.RawMessage `json:"args,omitempty"`
}

// Validate checks the grammars and, for invoke, the action and args: args, when present, one
// JSON object of at most MaxRoomArgsBytes bytes.
func (p *RoomCallPayload) Validate(invoke bool) *Error {
	if e := validRoomID("payload.room", p.Room); e != nil {
		return e
	}
	if e := validHostID("payload.provider", p.Provider); e != nil {
		return e
	}
	if e := validCapabilityID(p.CapabilityID); e != nil {
		return e
	}
	if !invoke {
		if p.Action != "" || p.Args != nil {
			return invalidField("payload.action", "observe takes no action or args")
		}
		return nil
	}
	return validActionArgs(p.Action, p.Args, MaxRoomArgsBytes)
}

// DecideApprovalPayload is the payload of decideApproval: a decision on any request of the
// daemon's approval queue (docs/operations.md, "Approvals and policy").
type DecideApprovalPayload struct {
	ApprovalID string `json:"approvalId"`
	// Approve is required: true lets the call run, false denies it.
	Approve *bool `json:"approve"`
	// Remember, with approve true, remembers the approval for the rest of the caller's
	// session generation (or room membership): the next call with the same target and the
	// same path (an fs call) or arguments (a capability action) runs without waiting.
	Remember bool `json:"remember,omitempty"`
	// Pattern, with remember, widens an fs call's path to a glob (policy path syntax, which
	// must match the call's own path); AnyArgs widens a capability action's arguments to any.
	Pattern string `json:"pattern,omitempty"`
	AnyArgs bool   `json:"anyArgs,omitempty"`
}

// MaxApprovalPatternBytes bounds decideApproval's pattern, as a policy bounds a glob.
const MaxApprovalPatternBytes = 4096

// Validate checks the approval id grammar, that approve is given, and that remember's
// options come with remember and an approval.
func (p *DecideApprovalPayload) Validate() *Error {
	if !approvalIDPattern.MatchString(p.ApprovalID) {
		return invalidField("payload.approvalId", "must be 24 lowercase hex digits")
	}
	if p.Approve == nil {
		return invalidField("payload.approve", "is required")
	}
	if p.Remember && !*p.Approve {
		return invalidField("payload.remember", "only an approval is remembered")
	}
	if (p.Pattern != "" || p.AnyArgs) && !p.Remember {
		return invalidField("payload.pattern", "pattern and anyArgs come with remember")
	}
	if p.Pattern != "" && p.AnyArgs {
		return invalidField("payload.anyArgs", "is for a capability action, pattern for an fs call: not both")
	}
	if len(p.Pattern) > MaxApprovalPatternBytes || !utf8.ValidString(p.Pattern) {
		return invalidField("payload.pattern", "must be at most %d bytes of UTF-8", MaxApprovalPatternBytes)
	}
	return nil
}

// ForgetApprovalPayload is the payload of forgetApproval: a remembered decision's id.
type ForgetApprovalPayload struct {
	MemoryID string `json:"memoryId"`
}

// Validate checks the id grammar.
func (p *ForgetApprovalPayload) Validate() *Error {
	if !approvalIDPattern.MatchString(p.MemoryID) {
		return invalidField("payload.memoryId", "must be 24 lowercase hex digits")
	}
	return nil
}

// RoomCapability is a capability published into a room, as listRoomCapabilities and
// publishCapability answer it: what internal/roomhost sends and what clients (the CLI, the MCP
// bridge) read.
type RoomCapability struct {
	Provider     string       `json:"provider"`
	ProviderSelf bool         `json:"providerSelf"`
	CapabilityID string       `json:"capabilityId"`
	Title        string       `json:"title"`
	Observe      bool         `json:"observe"`
	Actions      []RoomAction `json:"actions"`
	// Members are the hosts a publication of this host is limited to; empty means every member.
	Members []string `json:"members,omitempty"`
	// Available says whether a call can reach the capability now; when false,
	// UnavailableReason is one of the RoomUnavailable* reasons.
	Available         bool   `json:"available"`
	UnavailableReason string `json:"unavailableReason,omitempty"`
}

// Why a room capability is unavailable (RoomCapability.UnavailableReason).
const (
	// RoomUnavailableBusDisconnected: this host's bus connection is down, so no other
	// provider is reachable.
	RoomUnavailableBusDisconnected = "bus_disconnected"
	// RoomUnavailableProviderAbsent: the provider's presence in the room is not live (it
	// left, or its record expired).
	RoomUnavailableProviderAbsent = "provider_absent"
	// RoomUnavailableAdapterNotReady: this host's own adapter serving it is not ready.
	RoomUnavailableAdapterNotReady = "adapter_not_ready"
	// RoomUnavailableCallsUnavailable: this host's own adapter is ready, but the
	// capability's last calls all ended unavailable (capclient.UnavailableAfter of them);
	// calls still go through, and the first that succeeds makes it available again.
	RoomUnavailableCallsUnavailable = "calls_unavailable"
)

// RoomAction is one published action of a RoomCapability.
type RoomAction struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	// Input is the action's closed input from the provider's descriptor: {type, properties:
	// name → primitive type, required?}.
	Input       json.RawMessage `json:"input"`
	ApproveEach bool            `json:"approveEach"`
}

// AdmitBusHostPayload is the payload of admitBusHost: the host to admit, the public key of
// its nkey user (never a seed), and the rooms it is in, with those it owns.
type AdmitBusHostPayload struct {
	HostID string        `json:"hostId"`
	Nkey   string        `json:"nkey"`
	Rooms  []BusHostRoom `json:"rooms,omitempty"`
}

// BusHostRoom is one room of an admitted host.
type BusHostRoom struct {
	Room  string `json:"room"`
	Owner bool   `json:"owner,omitempty"`
}

// Validate checks the grammars and bounds.
func (p *AdmitBusHostPayload) Validate() *Error {
	if e := validHostID("payload.hostId", p.HostID); e != nil {
		return e
	}
	if !nkeyPattern.MatchString(p.Nkey) {
		return invalidField("payload.nkey", "must match %s", nkeyPattern.String())
	}
	if len(p.Rooms) > MaxBusHostRooms {
		return invalidField("payload.rooms", "must have at most %d items", MaxBusHostRooms)
	}
	for _, r := range p.Rooms {
		if e := validRoomID("payload.rooms", r.Room); e != nil {
			return e
		}
	}
	return nil
}

// BusHostPayload names an admitted host: the payload of removeBusHost.
type BusHostPayload struct {
	HostID string `json:"hostId"`
}

// Validate checks the host id grammar.
func (p *BusHostPayload) Validate() *Error { return validHostID("payload.hostId", p.HostID) }
