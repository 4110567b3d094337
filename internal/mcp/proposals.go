package mcp

// This file offers the adapter proposal tools (internal/proposal) to an MCP client whose
// session's policy allows proposals: adapter_propose sends proposeAdapter, and
// adapter_proposals listProposals, each for the bridge's session generation.

import (
	"context"
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/policy"
	"github.com/airlockhq/airlock/internal/proposal"
	"github.com/airlockhq/airlock/internal/protocol"
)

// proposalTools are the proposal tools of a session whose rules allow proposals; none
// otherwise, and none for a bridge without a session.
func proposalTools(rules *policy.Policy) []toolSpec {
	if !rules.AllowsProposals() {
		return nil
	}
	propose := &sdk.Tool{Name: proposal.ToolPropose, Title: "Propose an adapter", Description: proposal.ProposeDescription,
		InputSchema: proposal.InputSchema(),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(false)}}
	status := &sdk.Tool{Name: proposal.ToolStatus, Title: "Adapter proposals", Description: proposal.StatusDescription,
		InputSchema: proposal.StatusSchema(),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: new(false)}}
	return []toolSpec{
		{tool: propose, kind: kindPropose, fingerprint: "proposal\x00" + proposal.ToolPropose},
		{tool: status, kind: kindProposals, fingerprint: "proposal\x00" + proposal.ToolStatus},
	}
}

// callProposal runs adapter_propose or adapter_proposals for the bridge's session.
func (b *Bridge) callProposal(ctx context.Context, s toolSpec, clientName string, args json.RawMessage) (*sdk.CallToolResult, error) {
	cmd := client.Command{Operation: protocol.OpListProposals, SessionID: b.cfg.SessionID, Generation: &b.cfg.Generation, Client: clientName}
	if s.kind == kindPropose {
		cmd.Operation, cmd.Payload = protocol.OpProposeAdapter, protocol.ProposeAdapterPayload{Proposal: args}
	} else {
		var p protocol.ListProposalsPayload
		if err := json.Unmarshal(args, &p); err != nil {
			return errorResult(protocol.Errorf(protocol.CodeInvalidField, "the arguments are not a list request")), nil
		}
		cmd.Payload = p
	}
	resp, err := b.send(ctx, cmd)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return errorResult(protocol.AsError(err)), nil
	}
	if perr := resp.Err(); perr != nil {
		return errorResult(protocol.AsError(perr)), nil
	}
	return &sdk.CallToolResult{StructuredContent: json.RawMessage(resp.Data), Content: []sdk.Content{&sdk.TextContent{Text: string(resp.Data)}}}, nil
}
