// Package toolclient is the daemon's runtime client of the host tool-adapter protocol, whose
// wire is package tooladapter: it binds one capability and multiplexes invocations over one
// private Unix socket.
//
// Connect binds a Conn; Conn.Invoke runs one operation with admission control, a FIFO queue,
// timeouts from admission and targeted aborts, and Conn.Start does the same without holding a
// goroutine while the adapter works; Conn.Close revokes. Registry keeps one Conn per (host,
// session, generation). Telemetry reports content-free queue counts and timings.
//
// The files: conn.go the connection and its lifecycle (connect, bind, close), read.go what
// arrives from the adapter, write.go what goes to it, invoke.go admission and the ends of a
// request, abort.go the memory of aborted requests, registry.go the live connections,
// telemetry.go the queue telemetry.
//
// # Secrets
//
// The handle travels only in the bind frame. Every inbound line is searched for it before it
// is parsed, and a reflection ends the connection. No error message or log line quotes the
// handle, the endpoint path or a request path.
//
// # Errors
//
// Every failure is a *protocol.Error with a code of tooladapter's (tooladapter.Code*), so the
// daemon can return it unchanged. Errors from Invoke always carry details.indeterminate: true
// means the adapter may have executed the request and it must not be replayed blindly. Nothing
// in this package retries.
package toolclient
