// Command airlock is the operator CLI of airlockd: it reports host status, probes readiness,
// opens, lists, shows, attaches to and closes sessions, drains the host, and passes raw
// protocol envelopes through for scripts. It reaches the daemon only through internal/client
// over the owner socket.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT and SIGTERM cancel the context: attach and raw stop cleanly, and a call in flight
	// is abandoned instead of leaving the terminal hanging.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
