// Package connlimit bounds the connections a listener keeps open.
//
// airlockd's web page and metrics endpoint, and airlock mcp --http, listen on TCP ports that
// every local user can reach. Without a bound, another user holding connections there (each
// for up to the server's header timeout, then again) took every descriptor of the process,
// whose sockets, files and children then failed. Past the bound a connection is closed as
// soon as it is accepted, so that the accept queue drains and the server answers again as
// soon as such a flood ends (a listener that stopped accepting instead left the queue to
// drain one bound's worth of connections per header timeout, minutes after).
package connlimit

import (
	"net"
	"sync"
)

// Listener keeps at most cap(sem) of the connections it accepted open: one accepted beyond
// that is closed at once and Accept goes on to the next.
type Listener struct {
	net.Listener
	sem chan struct{} // one element per open connection
}

// New returns ln bounded to n open connections.
func New(ln net.Listener, n int) *Listener {
	return &Listener{Listener: ln, sem: make(chan struct{}, n)}
}

// Accept returns the next connection while fewer than the bound are open, closing those
// accepted meanwhile past the bound.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &conn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			c.Close()
		}
	}
}

// conn gives its place back when it is first closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
