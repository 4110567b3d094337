// Package tooladapter is the wire of the host tool-adapter protocol (adapter wire version "1.0",
// carried by daemon protocol v2), the part both sides share: descriptor admission, the eight
// frames and the typed fs.* payloads, operation names, limits, error codes, the handle and its
// reflection screen, and the path rules. The daemon's runtime client that binds a capability
// and multiplexes invocations over the adapter's socket is package toolclient beside it;
// airlock-fs, the adapter server, imports this package and no client code
// (TestServerImportsNoClient in internal/fsadapter).
//
// # Layers
//
//   - ParseDescriptor validates a closed descriptor against this host's incarnation and
//     returns a Descriptor whose capability handle is a redacting Handle. Summary is the
//     secret-free policy a manifest keeps.
//   - DecodeFrame and EncodeFrame move one frame between a line and a Frame, strictly;
//     ValidatePayload and ValidateResult check the typed operation bodies. DecodeBoundFrame,
//     InvokeEncoder and Handle.Screen are the same rules in the form a connection that
//     handles every frame of one binding uses.
//   - ValidateRelativePath, CanonicalRoot, ResolveUnder and CheckEndpoint confine paths and
//     vet the endpoint before anything is sent.
//
// # Secrets
//
// The handle travels only in the bind frame. A receiver searches every inbound line for it
// (Screen) before it is parsed. No error message quotes the handle, the endpoint path or a
// request path; errors name members in details.field instead.
//
// # Errors
//
// Every failure is a *protocol.Error with a stable code (the Code constants), so the daemon can
// return it unchanged. Nothing in this package retries.
package tooladapter
