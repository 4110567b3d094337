// Package capadapter is the wire of local capability adapters: the adapter protocol v1 (NDJSON
// on stdio) that external adapter processes speak to project bounded semantic capabilities,
// their descriptors, argument and result screens, and error codes. The runtime knows
// capabilities, not integrations: vendor protocols, endpoints and credentials stay inside the
// adapter, and nothing here parses them.
//
// This package is what may travel: a descriptor validated here means the same on every host.
// Running adapters (one child, and the supervisor of many) is package capclient beside it.
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
// Observe and invoke results pass ScreenResult: one over MaxResultBytes or not strict JSON
// breaks the protocol, while a well-formed one that fails a screen (ScreenURL,
// ScreenSensitiveText, ScreenSensitiveKey, ScreenShape) is result_withheld: the call ran, and
// its result is withheld from its caller without any harm to the adapter.
//
// Errors are *Error values with stable codes (errors.Is compares codes); WireCode maps local
// codes such as timeout onto the closed protocol set for projection, and keeps
// result_withheld.
package capadapter
