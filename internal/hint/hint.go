// Package hint is the one table of what to do next after an error: for every stable code
// that a call from an MCP client or from a model in an agent turn can end with, one sentence
// addressed to that caller. Both doors (internal/mcp and internal/turn) show it beside the
// code and the message, so that a model that cannot tell how to recover does not retry
// blindly or give up.
//
// A hint depends on the code alone, never on the error's message or details: an adapter's
// refusal reaches the runtime as a bare code (the capability protocol's error is exactly
// {code}, and the tool-adapter client drops an adapter's message), so that no adapter text
// crosses the secret boundary, and its hint must say what the code means and what to try
// without knowing more. Where the runtime itself finds a fault, its message says more (an
// invalid argument names the argument and what it must be).
//
// Codes are plain strings here, not the constants of the packages that define them, so
// that this package imports nothing and both doors can import it. TestEveryDoorCodeHasAHint
// reads the codes from those packages' source, so a code added there without a hint fails
// the build's tests, and a hint whose code is gone does too. docs/mcp.md lists the table;
// TestHintsDocumented keeps it equal to this one.
package hint

import "sort"

// Sentences shared by the codes of one kind. A model can do nothing about most of the
// daemon's own codes except stop and say so; a shared sentence keeps them consistent.
const (
	operator = "Nothing in the call can fix this: stop and tell the user the code, for whoever runs airlock to fix."
	grant    = "The session's filesystem grant cannot be used: stop and tell the user, who must grant the directory again and reopen the session."
	client   = "The request airlock's own client sent was refused, not your arguments: call again once, and if it fails the same way, tell the user the code."
	adapter  = "The filesystem adapter answered out of contract, which is a bug in it: stop and tell the user the code."
	unreach  = "The filesystem adapter serving this session cannot be reached: wait a few seconds and call again once, and if it fails again, stop and tell the user the code."
	room     = "The room needs its operator's attention: stop and tell the user the code."
	registry = "The capability adapter's registration needs its operator's attention: stop and tell the user the code."
	symlink  = "The path is or passes through a symbolic link, which airlock never follows: use the real path inside the granted directory (fs_list the parent to see what is there)."
	timedOut = "The operation did not finish within its time limit and may have taken effect: for a read or search, ask for less (a deeper path, a smaller maxResults) and call again; for a write or edit, fs_stat or fs_read the file before you call again."
	aborted  = "The call was cancelled before it finished, and a write may have happened: check the file (fs_stat, fs_read) or the device (observe) before you call again."
)

// Fallback is the hint of a code the table does not know: a tool adapter may answer with a
// code of its own, which passes to the caller without its message.
const Fallback = "airlock has no advice for this code: do not repeat the same call unchanged; check the state it would have changed, and tell the user if you cannot go on."

// entry is one row of the table: codes that share a hint, and the hint.
type entry struct {
	codes []string
	hint  string
}

// table is the hint of every code, grouped as the packages that define the codes group them.
// Codes that several protocols share (too_large, unavailable, timeout, internal_error, …)
// have one hint that covers each use. A code appears once.
var table = []entry{
	// The daemon's envelope and connection (internal/protocol).
	{[]string{"line_too_large"},
		"The request is larger than airlockd accepts in one message: send less in one call (a shorter content, fewer edits)."},
	{[]string{"invalid_utf8", "invalid_json", "invalid_field", "invalid_protocol_version", "incompatible_protocol", "unknown_operation", "unsupported_operation", "duplicate_request_id", "outbound_not_serializable"},
		client},
	{[]string{"unsupported_resource_policy"},
		operator},
	{[]string{"connection_busy"},
		"airlockd has as many calls in flight on this connection as it allows: wait for your other calls to finish, then call again."},
	{[]string{"connection_capacity"},
		"airlockd has no room for another connection right now: wait a few seconds and call again."},
	{[]string{"connection_evicted"},
		"The connection to airlockd was closed to admit another: call again."},
	{[]string{"connection_control_only"},
		"airlockd was full and admitted this connection for status and close only: wait a few seconds, then call again on a new connection."},
	{[]string{"attachment_capacity"},
		"The session has as many attached clients as airlockd allows: detach another client, or wait for one to go, then attach again."},
	{[]string{"fs_adapter_unavailable"},
		"The filesystem adapter that airlockd runs is not available: wait a few seconds and call again; if it persists, the operator must check airlockd's log (or its --fs-adapter setting)."},
	{[]string{"line_timeout"},
		"The request did not reach airlockd in time: call again."},
	{[]string{"outbound_record_too_large"},
		"The answer is larger than airlockd sends in one message: ask for less (a smaller maxBytes, maxEntries or maxResults, or a narrower path)."},
	{[]string{"internal_error"},
		"airlock failed in a way it did not expect, not because of your arguments: call again once, and if it fails the same way, stop and tell the user the code."},

	// Sessions and admission.
	{[]string{"session_not_found"},
		"This session generation is gone (closed, deleted or replaced), so its tools no longer work: stop and tell the user, who can open the session again."},
	{[]string{"stale_generation"},
		"This session was reopened as a newer generation and these tools belong to the old one: stop and tell the user, who can connect to the new generation."},
	{[]string{"session_policy_conflict", "session_capacity", "open_failed"},
		operator},
	{[]string{"session_busy"},
		"The session is busy with another request: wait a few seconds and call again."},
	{[]string{"host_not_ready"},
		"airlockd is still starting: wait a few seconds and call again."},
	{[]string{"host_draining"},
		"airlockd is shutting down: stop, and tell the user to start it again before you go on."},
	// An open's policy (internal/policy, internal/daemon): airlock mcp --dir --policy opens
	// its session again after a daemon restart, and a policy file gone or broken since then
	// refuses it, which every call is then answered with.
	{[]string{"invalid_policy"},
		"The session's policy cannot be used (a built-in name airlockd does not know, or a policy file that is unreadable, not the operator's, invalid or whose examples fail; details.field says which): stop and tell the user, who must fix it and open the session again."},

	// Durability, the wake journal, recovery.
	{[]string{"insecure_state_path", "corrupt_state", "catalog_update_failed", "durability_failed", "durability_completion_failed", "corrupt_journal", "invalid_journal_transition", "journal_entry_missing", "journal_record_too_large", "session_not_running", "session_failed", "session_precondition_failed", "durable_admission_unavailable", "ticket_not_found", "ticket_not_indeterminate", "turn_failed", "recovery_open_timeout", "recovery_deadline_exceeded", "restore_open_failed", "restore_wake_failed", "manifest_generation_mismatch", "conversation_identity_missing"},
		operator},
	{[]string{"session_queue_full"},
		"The session has as many prompts waiting as it allows: wait for the current turn to end, then send it again."},
	{[]string{"idempotency_conflict"},
		"This idempotency key was already used for a different call: send exactly the first call's arguments to get its outcome, or use a new key (over MCP, a new _meta \"io.airlock/idempotencyKey\")."},
	{[]string{"request_indeterminate"},
		"airlock cannot tell whether an earlier attempt of this call took effect: check the state it would have changed (fs_stat, fs_read, observe) before you do it again."},
	{[]string{"aborted"},
		aborted},
	{[]string{"tool_adapter_reprovision_required"},
		"airlockd restarted and this session's filesystem grant did not survive it: stop and tell the user to grant the directory again and reopen the session; the same call works then."},
	{[]string{"credentials_required"},
		"airlockd restarted without the model provider's credentials this session needs: stop and tell the user."},

	// The host tool-adapter protocol, as the daemon finds it (internal/tooladapter).
	{[]string{"invalid_tool_adapter_descriptor", "unsupported_tool_adapter_version", "invalid_tool_adapter_identity", "invalid_tool_adapter_endpoint", "invalid_tool_adapter_binding", "invalid_tool_adapter_capability", "unsupported_tool_operation", "invalid_tool_adapter_limit", "invalid_tool_adapter_field", "tool_adapter_binding_mismatch", "tool_adapter_identity_mismatch", "tool_adapter_contract_mismatch", "adapter_session_conflict", "adapter_endpoint_insecure"},
		grant},
	{[]string{"invalid_tool_adapter_path"},
		"The path breaks airlock's path rules (details.reason says which): give a path relative to the granted directory, such as \"src/main.go\" or \".\" for the directory itself, with no leading \"/\", no \".\" or \"..\" segments and no \"//\"."},
	{[]string{"adapter_registry_closed"},
		"airlockd is shutting down: stop, and tell the user to start it again before you go on."},
	{[]string{"adapter_root_invalid"},
		"The session's working directory is gone or is no longer a directory: stop and tell the user."},
	{[]string{"adapter_path_invalid"},
		"The path would leave the granted directory, which is never allowed: use a path inside it."},
	{[]string{"adapter_path_symlink"},
		symlink},
	{[]string{"adapter_path_unavailable"},
		"A component of the path does not exist or is not a directory (details.component counts from 1): fs_list the directory above it to see what exists, or, to create a file, fs_write it with create true in a directory that exists."},
	{[]string{"adapter_connect_timeout", "adapter_bind_timeout", "adapter_connection_failed", "adapter_connection_closed"},
		unreach},
	{[]string{"adapter_secret_reflected", "adapter_protocol_invalid", "adapter_response_mismatch", "adapter_error"},
		adapter},
	{[]string{"adapter_session_closed"},
		"This session's connection to its filesystem adapter has ended for good: stop and tell the user, who must grant the directory again and reopen the session."},
	{[]string{"adapter_operation_denied"},
		"The session's grant does not include this operation: use only the tools you are offered, or ask the user to grant it."},
	{[]string{"adapter_request_invalid"},
		"The arguments do not fit the tool's input schema (the message and details.field name the member and what it must be): correct that member and call again; if details.reason is duplicate_idempotency_key, the same call is still running, so wait for it."},
	{[]string{"adapter_request_too_large"},
		"The request is larger than one call may be (the grant's maxRequestBytes, or the line airlockd reads): send less in one call, for example change part of a file with fs_edit instead of writing all of it."},
	{[]string{"adapter_queue_capacity"},
		"The filesystem adapter has as many requests running and waiting as it allows: wait a moment (details.retryAfterMs, when present) and call again."},
	{[]string{"adapter_request_timeout"},
		timedOut},
	{[]string{"adapter_request_aborted"},
		aborted},
	{[]string{"adapter_abort_capacity"},
		"Too many cancellations are in progress: wait a moment and call again."},

	// airlock-fs's own refusals (internal/fsadapter/fsops), which reach the caller as a code
	// without the adapter's message or details: these hints cannot point at details.
	{[]string{"invalid_path"},
		"airlock-fs refused the path: give a path relative to the granted directory with no leading \"/\", no \"..\", no empty segments, and names the filesystem allows."},
	{[]string{"invalid_argument"},
		"An argument is out of the adapter's bounds, for fs_read most often an offset inside a multi-byte character (or a maxBytes smaller than it): start at the character's first byte, at most 3 bytes earlier, or ask for 4 bytes or more; keep the others within the input schema."},
	{[]string{"path_escape"},
		"The path would resolve outside the granted directory, which is never allowed: use a path inside it."},
	{[]string{"path_symlink"},
		symlink},
	{[]string{"not_found"},
		"Nothing exists at that path: fs_list its directory to find the right name, or, to create a file, call fs_write with create true."},
	{[]string{"parent_missing"},
		"The directory the file would go in does not exist, and these tools cannot create directories: write into a directory that exists (fs_list shows them), or ask the user to create it."},
	{[]string{"not_a_file"},
		"The path is a directory, not a file: fs_list it to see its entries, then call again with one of its files."},
	{[]string{"not_a_directory"},
		"The path, or a component of it, is a file where a directory was needed: give the directory that contains it instead."},
	{[]string{"unsupported_file_type"},
		"The path is a device, FIFO, socket or other special file, which airlock never opens: use a regular file or directory."},
	{[]string{"not_utf8"},
		"The file, or the text sent, is not valid UTF-8 (most likely a binary file), and these tools move text only: leave the file alone, or tell the user if you need its content."},
	{[]string{"file_exists"},
		"The file already exists and overwrite was not set: to replace it, call fs_write again with overwrite true (and expectedDigest, to replace only the version you know); to change part of it, use fs_edit; otherwise choose another path."},
	{[]string{"digest_mismatch"},
		"The file is no longer the version expectedDigest names (it changed since): fs_read it again, redo your change on what it holds now, and send it without expectedDigest or with the digest your own last write of it returned."},
	{[]string{"edit_not_found"},
		"An edit's oldText does not occur in the file: fs_read the file and copy the text exactly as it is there, spaces, tabs and line breaks included (with several edits, check each)."},
	{[]string{"edit_ambiguous"},
		"An edit's oldText occurs more than once in the file: include enough of the surrounding lines in oldText that it occurs exactly once (with several edits, check each)."},
	{[]string{"too_large"},
		"The request or its answer exceeds a size limit: ask for less (read a byte range with offset and maxBytes, list or search a narrower directory with a smaller maxEntries or maxResults) or send less (shorter content, shorter arguments)."},
	{[]string{"permission_denied"},
		"The operating system refused access to that path: leave it, or ask the user to change its permissions."},
	{[]string{"confinement_unavailable"},
		"airlock-fs refuses every path because the kernel lacks the confinement it requires (openat2): stop and tell the user."},
	{[]string{"canceled"},
		aborted},
	{[]string{"root_closed"},
		"The grant serving this session was revoked: stop and tell the user, who must grant the directory again."},
	{[]string{"io_error"},
		"The filesystem failed: if the error is retryable, call again; otherwise stop and tell the user the code."},

	// airlock-fs's result frames (internal/fsadapter/server).
	{[]string{"idempotency_capacity"},
		"airlock-fs is tracking as many running requests as it allows: wait a moment and call again."},
	{[]string{"idempotency_in_flight"},
		"A call with the same idempotency key is still running under another grant: wait for it to finish, then call again."},
	{[]string{"request_timeout"},
		timedOut},
	{[]string{"operation_denied"},
		"The grant does not include this operation: use only the tools you are offered, or ask the user to grant it."},
	{[]string{"handle_in_result"},
		"The answer would have shown the grant's secret handle, so airlock-fs withheld it: do not read that file or search for that text, and tell the user."},

	// airlock-fs's admin socket (internal/fsadapter/server/admin.go), where airlockd mints the
	// grant of an airlock mcp --dir session: when the session cannot be opened again after a
	// daemon restart, the refusal answers every call (its invalid_request, line_timeout and
	// connection_evicted share the hints of other protocols').
	{[]string{"root_invalid"},
		"The directory this session grants is gone or cannot be opened as a directory, so no tool can work: stop and tell the user, who must restore it or start airlock mcp with a directory that exists."},
	{[]string{"grant_capacity"},
		"airlock-fs serves as many grants as it allows, so this session's directory could not be granted: stop and tell the user, who must end another session first."},
	{[]string{"server_closing"},
		"airlock-fs, which serves this session's directory, is shutting down: stop and tell the user, who must start airlockd again."},
	{[]string{"grant_exists", "grant_not_found"},
		operator},

	// Capability adapters (internal/capadapter): the protocol's closed set first.
	{[]string{"invalid_request"},
		"The request was refused as not well formed, which is a bug in the caller rather than in your arguments: call again once, and if it fails the same way, tell the user the code."},
	{[]string{"unsupported_method"},
		"The capability does not answer that kind of call: use only the tools you are offered."},
	{[]string{"unknown_capability"},
		"That capability is not served any more (its adapter was removed, or its publication withdrawn): list the tools again and use one that is listed."},
	{[]string{"unsupported_action"},
		"The capability does not declare that action: list the tools again and use one that is listed."},
	{[]string{"invalid_args"},
		"The arguments do not fit the action: if the message names an argument, give it the type it names; if the adapter reported it (it gives no reason), the values are ones the device refuses, so observe its state and try values it accepts."},
	{[]string{"unavailable"},
		"The capability, or the room's provider, cannot be reached right now: wait a few seconds and call again, and if it keeps failing, tell the user."},
	{[]string{"internal"},
		"The adapter or the room's provider failed without saying why, not because of your arguments: observe the state, then call again once at most."},
	{[]string{"timeout"},
		"No answer came within the call's deadline, and an action may have taken effect: observe the state before you call again."},
	{[]string{"malformed_response"},
		"The adapter answered out of protocol and was restarted: wait a few seconds and call again."},
	{[]string{"result_withheld"},
		"The call ran (an action's effect happened) but its result failed airlock's screens and was withheld: do not repeat an action for its result; observe the state instead."},
	{[]string{"invalid_descriptor", "capability_count", "descriptor_changed", "invalid_registration", "capability_conflict", "unknown_adapter", "too_many_adapters", "adapter_changed", "lease_expired"},
		registry},

	// Rooms (internal/room, internal/roomhost).
	{[]string{"unauthorized"},
		"The provider refused the call: this host may not (or no longer) use that capability or action in the room, so list the tools again and use only those listed."},
	{[]string{"busy"},
		"The provider has as many of this host's calls running as it allows: wait for your other calls to finish, then call again."},
	{[]string{"duplicate_request"},
		"The provider already answered a request of this id for a different call: call again, which sends a new id."},
	{[]string{"policy_denied"},
		"The operator's policy forbids this call: do not repeat it; tell the user, or do something else."},
	{[]string{"approval_required"},
		"The operator's policy wants their approval before this call and it was not run: do not repeat it; tell the user what you meant to do."},
	{[]string{"record_failed"},
		"The call could not be recorded, so it did not run: call again later, and if it keeps failing, stop and tell the user."},
	{[]string{"approval_denied"},
		"The operator (of this host, or of the room's provider) denied this call: do not repeat it; tell the user, or do something else."},
	{[]string{"approval_timeout"},
		"Nobody approved the call in time (on this host, or on the room's provider): tell the user it waits for their approval, and call again only when they ask."},
	{[]string{"approval_queue_full"},
		"Too many requests already wait for the operator's approval: tell the user, and call again once they have decided some."},
	{[]string{"invalid_reply"},
		"The provider's answer failed airlock's checks, and the call may have run: observe the state before you call again."},
	{[]string{"invalid_record", "invalid_key", "unknown_approval", "not_rememberable", "room_exists", "not_owner", "invalid_join_code", "too_many_invites"},
		room},
	{[]string{"unknown_room"},
		"This host is not (or no longer) in the session's room: stop and tell the user."},

	// Adapter proposals (internal/proposal).
	{[]string{"proposal_invalid"},
		"The proposal is malformed where the message's field says: fix that field (no other keys than the tool's schema names) and propose again."},
	{[]string{"proposal_outside_workspace"},
		"A file the proposal names is outside the workspace, behind a symbolic link or a \"..\", or is no regular file: put the adapter's files in the workspace, name them by relative path, and propose again."},
	{[]string{"proposal_env_refused"},
		"The argv would set or pass environment (env, NAME=value, $VAR, --pass-env), which a proposal may not: read configuration from a file of the workspace instead, and propose again."},
	{[]string{"proposal_inline_code"},
		"An interpreter option before the script could run code that no file holds: name the script as the first argument, and propose again."},
	{[]string{"proposals_not_allowed"},
		"This session's policy does not let you propose adapters: do not try again; tell the user what the adapter would do."},
	{[]string{"unknown_proposal"},
		"No proposal of yours has that id: list your proposals without an id to see them."},
	{[]string{"too_many_proposals"},
		"You have as many proposals in progress as you may: wait until the operator decides on them (list their state), then propose again."},
	{[]string{"proposal_name_taken"},
		"An adapter or a proposal in progress has that name already: choose another name and propose again."},
	{[]string{"proposal_validation_failed", "proposal_unvalidated", "proposal_missing_capability"},
		"The validator did not accept the adapter as proposed: read the report's failed probes in the proposal's state, fix the adapter or the proposal, and propose again."},

	// The doors' own codes.
	{[]string{"unknown_tool"},
		"No tool of that name is granted to this session: call only the tools in your tool list."},
	{[]string{"daemon_unreachable"},
		"airlock mcp cannot reach airlockd (it is not running, or it restarted): wait a few seconds and call again; if it keeps failing, or the error is not retryable, tell the user to start airlockd and then restart this MCP server."},
}

// byCode indexes table.
var byCode = func() map[string]string {
	m := map[string]string{}
	for _, e := range table {
		for _, c := range e.codes {
			if _, dup := m[c]; dup {
				panic("hint: code " + c + " appears twice in the table")
			}
			m[c] = e.hint
		}
	}
	return m
}()

// For returns the hint of code, or Fallback when the table does not know it.
func For(code string) string {
	if h, ok := byCode[code]; ok {
		return h
	}
	return Fallback
}

// Lookup returns the hint of code and whether the table knows it.
func Lookup(code string) (string, bool) {
	h, ok := byCode[code]
	return h, ok
}

// Codes returns every code of the table, sorted.
func Codes() []string {
	out := make([]string, 0, len(byCode))
	for c := range byCode {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Row is one row of the table as docs/mcp.md lists it: codes that share a hint.
type Row struct {
	Codes []string
	Hint  string
}

// Rows returns the table in its order, for documentation.
func Rows() []Row {
	out := make([]Row, len(table))
	for i, e := range table {
		out[i] = Row{Codes: append([]string(nil), e.codes...), Hint: e.hint}
	}
	return out
}
