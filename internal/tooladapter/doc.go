// Package tooladapter is the daemon side of the host tool-adapter protocol (adapter wire
// version "1.0", carried by daemon protocol v2): descriptor admission, the eight frames and the
// typed fs.* payloads, daemon-side path checks, and the runtime client that binds one
// capability and multiplexes invocations over one private Unix socket.
//
// # Layers
//
//   - ParseDescriptor validates a closed descriptor against this host's incarnation and
//     returns a Descriptor whose capability handle is a redacting Handle. Summary is the
//     secret-free policy a manifest keeps.
//   - DecodeFrame and EncodeFrame move one frame between a line and a Frame, strictly;
//     ValidatePayload and ValidateResult check the typed operation bodies.
//   - ValidateRelativePath, CanonicalRoot, ResolveUnder and CheckEndpoint confine paths and
//     vet the endpoint before anything is sent.
//   - Connect binds a Conn; Conn.Invoke runs one operation with admission control, a FIFO
//     queue, timeouts from admission and targeted aborts, and Conn.Start does the same without
//     holding a goroutine while the adapter works; Conn.Close revokes. Registry keeps one Conn
//     per (host, session, generation).
//
// # Secrets
//
// The handle travels only in the bind frame. Every inbound line is searched for it before it
// is parsed, and a reflection ends the connection. No error message or log line quotes the
// handle, the endpoint path or a request path; errors name members in details.field instead.
//
// # Errors
//
// Every failure is a *protocol.Error with a stable code (the Code constants), so the daemon can
// return it unchanged. Errors from Invoke always carry details.indeterminate: true means the
// adapter may have executed the request and it must not be replayed blindly. Nothing in this
// package retries.
package tooladapter
