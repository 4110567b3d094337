// Package capadapter runs local capability adapters: external processes that speak the adapter
// protocol v1 (NDJSON on stdio) and project bounded semantic capabilities. The runtime knows
// capabilities, not integrations: vendor protocols, endpoints and credentials stay inside the
// adapter, and nothing here parses them.
//
// # Protocol v1
//
// One UTF-8 JSON object per LF-terminated line, each frame at most MaxFrameBytes (65,536)
// bytes including the LF, protocolVersion 1 on every envelope, one request in flight. A
// request is {protocolVersion, id, method, capabilityId?, action?, args?} with methods list,
// describe, observe and invoke, and exactly each method's key set; a response is
// {protocolVersion, id} plus exactly one of result or error {code}, with codes from the closed
// set (invalid_request, unsupported_method, unknown_capability, unsupported_action,
// invalid_args, unavailable, too_large, internal). Invoke args are at most MaxArgsBytes (1,024)
// and results at most MaxResultBytes (4,096). Responses are decoded strictly: duplicate,
// case-variant and unknown keys are refused (DecodeResponse).
//
// Descriptors {capabilityId, title, version, observe, actions[{name, title, input}]} are
// validated by ParseDescriptor / ValidateDescriptor: id, action and property grammars, text
// bounds, at most 4 actions of at most 16 primitive properties, at most 1,024 encoded bytes,
// and the sensitive-name and URL screens. Every screen and grammar applies to decoded text,
// what a client sees: a raw-byte scan is only an early reject, since a JSON escape (\u003a,
// \/) hides text from it. An adapter lists 1 to MaxCapabilities (8).
//
// # Children
//
// A Client is one child: started without a shell, with only the environment variables in
// envAllowlist (PATH, HOME, USER, LOGNAME, TMPDIR, LANG, LC_ALL, LC_CTYPE, TZ), in its own
// process group, its stderr kept in a bounded ring for the operator (Logs) and never
// projected. Startup is list, then describe of each listed id (byte-identical after canonical
// encoding), within the start deadline. Any malformed, oversized, late, duplicate, wrong-id or
// wrong-version response, EOF or timeout fails the call and SIGKILLs the whole process group,
// which is then reaped, so a stale response can never pair with a later request. A graceful
// stop closes stdin, waits, SIGTERMs the group, waits, SIGKILLs it, each wait bounded.
//
// # Supervisor
//
// A Supervisor runs many registrations (name, command, args), each up to 8 capabilities, with
// capability ids unique across it. Register starts and validates the adapter before it
// returns, so the caller persists only what works; a replaced registration's child is reaped
// before Register returns. A child that dies is restarted with exponential backoff
// (DefaultBackoffMin doubling to DefaultBackoffMax, reset after DefaultHealthyAfter) while its
// capabilities report unavailable; Status shows state, pid, restarts and the last failure.
// Invoke checks the action and its args against the descriptor before the child is called,
// and results pass semantic screens (checkResult) before they are returned.
//
// Errors are *Error values with stable codes (errors.Is compares codes); WireCode maps local
// codes such as timeout onto the closed protocol set for projection.
package capadapter
