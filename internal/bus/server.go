// Package bus is airlock's only NATS code. It runs an embedded NATS server
// (github.com/nats-io/nats-server/v2) with JetStream, and implements the busport contract on
// github.com/nats-io/nats.go connections: request/reply with bounded payloads, subject
// handlers with bounded concurrency, and JetStream key/value buckets with TTLs and watches.
//
// # Listeners
//
// By default the server listens on 127.0.0.1 on a random port and nowhere else: no HTTP
// monitoring, no cluster or leaf listener. A listen address whose host is not a loopback
// address is refused unless ServerConfig.AllowRemote says otherwise; NoListen serves
// in-process connections only. JetStream keeps its store under the state directory given, in
// a directory of mode 0700.
//
// # Shutdown
//
// A Conn drains (its subscriptions stop, their running handlers finish, published messages are
// flushed) before it closes; a Server shuts down and waits until its goroutines have exited.
// Close the connections before the server they use.
package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultMaxPayload bounds one message through the embedded server and one payload, reply or
// value through a Conn. Room messages are far smaller (arguments ≤ 8 KiB, results ≤ 16 KiB,
// plus their envelope); 64 KiB leaves room for records without letting a peer make the server
// buffer megabytes per message.
const DefaultMaxPayload = 64 << 10

// DefaultMaxConns bounds the client connections of the embedded server, authenticated or not.
// A local server's users are the daemons of one operator, a fabric node's the hosts of its
// machine or site: far fewer. Its client port takes a connection from anyone who can reach
// it (on loopback: every local user), and one that never authenticates is held for the
// server's auth timeout; without a bound, a stranger opening them as fast as they closed held
// most of the daemon's descriptors. Past it the server answers "maximum connections
// exceeded" and closes the connection at once.
const DefaultMaxConns = 1024

// readyTimeout bounds the wait for a started server to accept connections. Start-up is local
// work (open the JetStream store, bind one loopback port); a server that needs longer is stuck.
const readyTimeout = 10 * time.Second

// JetStream store limits of the embedded server. Room state is small (rosters, projections and
// presence of a handful of hosts); the limits only stop a runaway writer from filling the disk.
const (
	jetStreamMaxStore  = 256 << 20
	jetStreamMaxMemory = 32 << 20
)

// ServerConfig configures an embedded server.
type ServerConfig struct {
	// StateDir is the daemon's state directory; JetStream keeps its store in StateDir/nats
	// (created with mode 0700; an existing one must not be accessible to others).
	StateDir string
	// Listen is the host:port clients connect to. Empty means 127.0.0.1 on a random port;
	// port 0 picks a random port.
	Listen string
	// AllowRemote permits a Listen host that is not a loopback address.
	AllowRemote bool
	// NoListen serves in-process connections only (Listen is then ignored).
	NoListen bool
	// Name names the server (unique within a cluster); empty lets the server pick one.
	Name string
	// MaxPayload bounds one message; zero means DefaultMaxPayload.
	MaxPayload int
	// MaxConns bounds the client connections; zero means DefaultMaxConns.
	MaxConns int
	// Fabric, when set, makes the server a node of a room fabric (see LoadFabric): its
	// name, client listener, cluster or leaf connections, TLS and users come from it, and
	// Name, Listen and AllowRemote are ignored.
	Fabric *Fabric
	// Host, without a fabric, makes the server admit nkey users only (local.go): this host,
	// in process, with the permissions of no room until SetUsers gives it its rooms; the
	// other hosts SetUsers adds; and the server's warden. Without Host or a fabric the
	// server admits any connection, which only tests and in-process servers should want.
	Host *LocalHost
	// Logger, when set, gets the server's errors and warnings (and its notices at debug),
	// bounded (natsLog); without it the server logs nothing.
	Logger *slog.Logger
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns         *server.Server
	maxPayload int
	fabric     *Fabric
	local      *local // nil without ServerConfig.Host

	mu   sync.Mutex // guards opts, the options the server runs with (SetUsers replaces them); held over an in-process connect (connect)
	opts *server.Options
}

// ErrConfig is wrapped by the errors StartServer returns for a configuration it refuses.
var ErrConfig = errors.New("bus: invalid configuration")

// StartServer starts an embedded server as cfg says and returns once it accepts connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: no state directory", ErrConfig)
	}
	maxPayload := cfg.MaxPayload
	if maxPayload == 0 {
		maxPayload = DefaultMaxPayload
	}
	if maxPayload < 1024 || maxPayload > 8<<20 {
		return nil, fmt.Errorf("%w: max payload %d outside [1 KiB, 8 MiB]", ErrConfig, maxPayload)
	}
	maxConns := cfg.MaxConns
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	opts := &server.Options{
		ServerName:         cfg.Name,
		MaxConn:            maxConns,
		JetStream:          true,
		JetStreamMaxStore:  jetStreamMaxStore,
		JetStreamMaxMemory: jetStreamMaxMemory,
		MaxPayload:         int32(maxPayload),
		NoLog:              true,
		NoSigs:             true,
		DontListen:         cfg.NoListen,
	}
	if cfg.Fabric != nil {
		if cfg.NoListen {
			return nil, fmt.Errorf("%w: a fabric node listens", ErrConfig)
		}
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
		if err := cfg.Fabric.apply(opts); err != nil {
			return nil, err
		}
	} else if !cfg.NoListen {
		host, port, err := listenAddress(cfg.Listen, cfg.AllowRemote)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	var loc *local
	if cfg.Host != nil {
		if cfg.Fabric != nil {
			return nil, fmt.Errorf("%w: a fabric node's users come from its file", ErrConfig)
		}
		var err error
		if loc, err = newLocal(cfg.Host); err != nil {
			return nil, err
		}
		if opts.Nkeys, err = loc.users([]FabricUser{{Host: loc.host, Nkey: loc.hostPub}}); err != nil {
			return nil, err
		}
	}
	store := filepath.Join(cfg.StateDir, "nats")
	if err := privateDir(store); err != nil {
		return nil, err
	}
	opts.StoreDir = store

	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: server: %w", err)
	}
	if cfg.Logger != nil {
		ns.SetLogger(newNATSLog(cfg.Logger), false, false)
	}
	ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, fmt.Errorf("bus: server not ready within %v", readyTimeout)
	}
	return &Server{ns: ns, maxPayload: maxPayload, fabric: cfg.Fabric, local: loc, opts: opts}, nil
}

// listenAddress parses a Listen value into the server's host and port (-1: random).
func listenAddress(listen string, allowRemote bool) (string, int, error) {
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen address: %v", ErrConfig, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen port %q", ErrConfig, portText)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return "", 0, fmt.Errorf("%w: listen host must be an IP address", ErrConfig)
	}
	if !addr.IsLoopback() && !allowRemote {
		return "", 0, fmt.Errorf("%w: listen host %s is not a loopback address", ErrConfig, addr)
	}
	if port == 0 {
		return host, server.RANDOM_PORT, nil
	}
	return host, int(port), nil
}

// privateDir makes dir with mode 0700, or checks that an existing dir has no group or other
// permission bits.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bus: store directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("bus: store directory: %w", err)
	}
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: store directory %s must be a directory of mode 0700", ErrConfig, dir)
	}
	return nil
}

// ClientURL is the URL other processes connect to (nats://host:port), or "" with NoListen.
func (s *Server) ClientURL() string {
	if s.ns.Addr() == nil {
		return ""
	}
	return s.ns.ClientURL()
}

// MaxPayload is the largest message the server accepts.
func (s *Server) MaxPayload() int { return s.maxPayload }

// Close shuts the server down and waits until it has stopped. It is idempotent.
func (s *Server) Close() error {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	return nil
}
