package connlimit

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
)

// pipeListener hands out one end of a net.Pipe per dial: a listener with no descriptors,
// whose waits synctest sees.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error   { p.once.Do(func() { close(p.done) }); return nil }
func (p *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }

func (p *pipeListener) dial() net.Conn {
	server, client := net.Pipe()
	p.conns <- server
	return client
}

// TestConnectionsBounded: a Listener keeps at most its bound of connections open; one beyond
// is closed as soon as it is accepted, and a place comes back when an open one closes (once,
// however often it is closed). Unbounded, another local user's idle connections to the web
// page's port took every descriptor of the daemon.
func TestConnectionsBounded(t *testing.T) {
	const MaxConns = 64
	synctest.Test(t, func(t *testing.T) {
		p := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
		ln := New(p, MaxConns)
		accepted := make(chan net.Conn, 2*MaxConns)
		go func() {
			defer close(accepted)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
		var clients []net.Conn
		for range MaxConns {
			clients = append(clients, p.dial())
		}
		synctest.Wait()
		if n := len(accepted); n != MaxConns {
			t.Fatalf("%d connections open, want %d", n, MaxConns)
		}
		refused := func(what string) {
			t.Helper()
			c := p.dial()
			defer c.Close()
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("%s: read %v, want the connection closed", what, err)
			}
			synctest.Wait()
			if n := len(accepted); n != MaxConns {
				t.Errorf("%s: %d connections open, want %d", what, n, MaxConns)
			}
		}
		refused("one past the bound")
		first := <-accepted
		first.Close()
		first.Close()
		clients = append(clients, p.dial())
		synctest.Wait()
		if n := len(accepted); n != MaxConns {
			t.Errorf("after one closed (twice) and one more dialled: %d open, want %d", n, MaxConns)
		}
		refused("one past the bound again")
		p.Close()
		for c := range accepted {
			c.Close()
		}
		for _, c := range clients {
			c.Close()
		}
	})
}
