package protocol

// Operation names.
const (
	OpHandshake       = "handshake"
	OpOpen            = "open"
	OpWake            = "wake"
	OpSteer           = "steer"
	OpFollowUp        = "followUp"
	OpStatus          = "status"
	OpAbort           = "abort"
	OpAttach          = "attach"
	OpDetach          = "detach"
	OpClose           = "close"
	OpDrain           = "drain"
	OpListSessions    = "listSessions"
	OpDescribeSession = "describeSession"
	OpInvokeTool      = "invokeTool"
	OpAbortTool       = "abortTool"

	// Capability adapters (2.x).
	OpRegisterAdapter    = "registerAdapter"
	OpRemoveAdapter      = "removeAdapter"
	OpListAdapters       = "listAdapters"
	OpAdapterLogs        = "adapterLogs"
	OpApproveAdapter     = "approveAdapter"
	OpListCapabilities   = "listCapabilities"
	OpDescribeCapability = "describeCapability"
	OpObserveCapability  = "observeCapability"
	OpInvokeCapability   = "invokeCapability"
)

// identity says which envelope identity members an operation takes.
type identity int

const (
	idNone     identity = iota // no sessionId, generation or idempotencyKey
	idOptional                 // optional sessionId and generation
	idSession                  // sessionId only
	idBound                    // sessionId and generation
	idKeyed                    // sessionId, generation and idempotencyKey
)

type opSpec struct {
	minMajor int
	identity identity
}

// operations is the operation table. Version 1 has exactly the eleven operations of the original
// protocol; the rest exist in 2.x only.
var operations = map[string]opSpec{
	OpHandshake:       {1, idNone},
	OpOpen:            {1, idBound},
	OpWake:            {1, idKeyed},
	OpSteer:           {1, idKeyed},
	OpFollowUp:        {1, idKeyed},
	OpStatus:          {1, idOptional},
	OpAbort:           {1, idBound},
	OpAttach:          {1, idBound},
	OpDetach:          {1, idBound},
	OpClose:           {1, idBound},
	OpDrain:           {1, idNone},
	OpListSessions:    {2, idNone},
	OpDescribeSession: {2, idSession},
	OpInvokeTool:      {2, idBound},
	OpAbortTool:       {2, idNone},

	OpRegisterAdapter:    {2, idNone},
	OpRemoveAdapter:      {2, idNone},
	OpListAdapters:       {2, idNone},
	OpAdapterLogs:        {2, idNone},
	OpApproveAdapter:     {2, idNone},
	OpListCapabilities:   {2, idNone},
	OpDescribeCapability: {2, idNone},
	OpObserveCapability:  {2, idOptional},
	OpInvokeCapability:   {2, idOptional},

	OpTicket:    {2, idNone},
	OpReconcile: {2, idNone},

	OpRoomStatus:            {2, idNone},
	OpCreateRoom:            {2, idNone},
	OpListRooms:             {2, idNone},
	OpShowRoom:              {2, idNone},
	OpCloseRoom:             {2, idNone},
	OpInviteRoom:            {2, idNone},
	OpJoinRoom:              {2, idNone},
	OpRemoveRoomMember:      {2, idNone},
	OpPublishCapability:     {2, idNone},
	OpUnpublishCapability:   {2, idNone},
	OpListRoomCapabilities:  {2, idNone},
	OpObserveRoomCapability: {2, idNone},
	OpInvokeRoomCapability:  {2, idNone},
	OpListApprovals:         {2, idNone},
	OpDecideApproval:        {2, idNone},
	OpRoomUILogin:           {2, idNone},
	OpFabricStatus:          {2, idNone},
	OpAdmitBusHost:          {2, idNone},
	OpListBusHosts:          {2, idNone},
	OpRemoveBusHost:         {2, idNone},

	OpListRememberedApprovals: {2, idNone},
	OpForgetApproval:          {2, idNone},

	OpProposeAdapter: {2, idBound},
	OpListProposals:  {2, idOptional},
}

// v1Operations is the handshake order of the version 1 operations.
var v1Operations = []string{
	OpHandshake, OpOpen, OpWake, OpSteer, OpFollowUp, OpStatus, OpAbort, OpAttach, OpDetach, OpClose, OpDrain,
}

// v2Operations are the operations that 2.x adds, in handshake order.
var v2Operations = []string{
	OpListSessions, OpDescribeSession, OpInvokeTool,
	OpRegisterAdapter, OpRemoveAdapter, OpListAdapters, OpAdapterLogs, OpApproveAdapter,
	OpListCapabilities, OpDescribeCapability, OpObserveCapability, OpInvokeCapability,
	OpTicket, OpReconcile, OpAbortTool,
}

// Operations lists the operations of a protocol major version, in handshake order.
func Operations(major int) []string {
	ops := append([]string(nil), v1Operations...)
	if major >= 2 {
		ops = append(ops, v2Operations...)
		ops = append(ops, roomOperations...)
		ops = append(ops, approvalOperations...)
		ops = append(ops, proposalOperations...)
	}
	return ops
}

// ControlOperation reports whether op is served on a connection of the reserved control band:
// the short operations an operator needs to see and take back a host that every regular
// connection is busy on. handshake and status (what airlock probe and airlock status send),
// drain, close (which ends a session and revokes its tool grant), abort (which ends a
// running turn), and listApprovals and decideApproval (airlock approvals, approve, deny):
// the regular connections may all be busy with calls that wait for the operator, who must
// then still be able to decide them (TestApprovalsOnTheControlBand). None of them attaches
// or waits for an adapter; drain waits at most its timeoutMs for running turns.
func ControlOperation(op string) bool {
	switch op {
	case OpHandshake, OpStatus, OpDrain, OpClose, OpAbort, OpListApprovals, OpDecideApproval:
		return true
	}
	return false
}
