package web

import (
	"net"
	"sync"
)

// MaxConns bounds the page's open connections: a few tabs of one operator, each with its
// event stream and the browser's handful of parallel requests, fit many times over.
//
// The page listens on a TCP port that every local user can reach. Without a bound, another
// user holding connections there (each for up to ReadHeaderTimeout, then again) took every
// descriptor of the daemon, whose owner socket, files and children then failed. Past the
// bound a connection is closed as soon as it is accepted, so that the accept queue drains and
// the page answers again as soon as such a flood ends (a listener that stopped accepting
// instead left the queue to drain MaxConns connections per ReadHeaderTimeout, minutes after).
const MaxConns = 64

// limitListener keeps at most cap(sem) of the connections it accepted open: one accepted
// beyond that is closed at once and Accept goes on to the next.
type limitListener struct {
	net.Listener
	sem chan struct{} // one element per open connection
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		default:
			c.Close()
		}
	}
}

// limitConn gives its place back when it is first closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
