package proposal

// This file is what both agent doors (internal/mcp's tools, an agent turn's tools) offer a
// model: the two tools' names, descriptions and input schemas, defined once.

// Tool names, the same at both doors.
const (
	// ToolPropose files a proposal (the daemon's proposeAdapter).
	ToolPropose = "adapter_propose"
	// ToolStatus lists the session's proposals, or one (the daemon's listProposals).
	ToolStatus = "adapter_proposals"
)

// Tool descriptions, addressed to the model.
const (
	ProposeDescription = "Propose a capability adapter you wrote in the workspace for the operator to run. " +
		"command is a file of the workspace (relative path) or an interpreter (python3, node, sh, bash, perl, ruby) whose first argument is the script; " +
		"no shell, no env, no NAME=value, no $VAR, no interpreter options before the script. " +
		"Nothing runs until the operator approves it: the answer is the proposal with state pending_run and the SHA-256 of every file that will run; " +
		"do not change those files afterwards, or it will not run. After approval airlock validates the adapter and runs it for this session; " +
		"publish asks a second approval to publish named actions into a room. Poll " + ToolStatus + " for its state."
	StatusDescription = "List your adapter proposals, or the one called id: state pending_run, starting, running, pending_publish, published, refused, failed or ended, " +
		"the validator's report once it ran, and error when it did not run."
)

// InputSchema is the input schema of ToolPropose: the Proposal, closed, with its bounds.
func InputSchema() map[string]any {
	str := func(desc string, max int) map[string]any {
		return map[string]any{"type": "string", "description": desc, "minLength": 1, "maxLength": max}
	}
	capID := map[string]any{"type": "string", "pattern": capabilityPattern.String()}
	return map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"name", "command", "capabilities"},
		"properties": map[string]any{
			"name":    map[string]any{"type": "string", "description": "The adapter's name.", "pattern": namePattern.String()},
			"command": str("A file of the workspace (relative path) or an interpreter name.", MaxArgBytes),
			"args": map[string]any{"type": "array", "maxItems": MaxArgs, "description": "Arguments; for an interpreter the script comes first.",
				"items": map[string]any{"type": "string", "maxLength": MaxArgBytes}},
			"capabilities": map[string]any{"type": "array", "minItems": 1, "maxItems": MaxCapabilities, "uniqueItems": true,
				"description": "The capability ids the adapter serves.", "items": capID},
			"publish": map[string]any{
				"type": "object", "additionalProperties": false, "required": []string{"room", "capabilities"},
				"description": "Ask, after the adapter runs, to publish these into a room (a second approval).",
				"properties": map[string]any{
					"room": map[string]any{"type": "string", "pattern": roomPattern.String()},
					"capabilities": map[string]any{"type": "array", "minItems": 1, "maxItems": MaxCapabilities,
						"items": map[string]any{
							"type": "object", "additionalProperties": false, "required": []string{"capabilityId"},
							"properties": map[string]any{
								"capabilityId": capID,
								"actions": map[string]any{"type": "array", "maxItems": MaxPublishActions,
									"items": map[string]any{"type": "string", "pattern": actionPattern.String()}},
								"observe": map[string]any{"type": "boolean"},
							},
						}},
				},
			},
			"leaseSeconds": map[string]any{"type": "integer", "minimum": MinLeaseSeconds, "maximum": MaxLeaseSeconds,
				"description": "End the adapter after this long (default two hours); it ends with the session anyway."},
			"reason": map[string]any{"type": "string", "maxLength": MaxReasonBytes, "description": "One line for the operator: why."},
		},
	}
}

// StatusSchema is the input schema of ToolStatus.
func StatusSchema() map[string]any {
	return map[string]any{
		"type": "object", "additionalProperties": false, "required": []string{},
		"properties": map[string]any{
			"id": map[string]any{"type": "string", "pattern": "^[0-9a-f]{24}$", "description": "One proposal's id; none lists them all."},
		},
	}
}
