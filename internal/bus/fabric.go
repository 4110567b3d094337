package bus

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"

	"github.com/nats-io/nkeys"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// A fabric file makes the embedded server one node of a room fabric: a node of a NATS cluster
// (routes to its peers) or a leaf node of a NATS deployment the operator already runs. It is
// one JSON object, decoded strictly (unknown, duplicate and case-variant keys are refused);
// relative paths are relative to the file's directory. docs/fabric.md describes every member.
//
//	{
//	  "version": 1,
//	  "node": "n1",
//	  "mode": "cluster",
//	  "listen": "10.0.0.1:4222",
//	  "tls": {"ca": "ca.pem", "cert": "n1.pem", "key": "n1-key.pem"},
//	  "cluster": {"name": "airlock", "listen": "10.0.0.1:6222",
//	              "routes": ["10.0.0.2:6222", "10.0.0.3:6222"]},
//	  "host": {"id": "<64 hex>", "seed": "n1.nk"},
//	  "users": [{"host": "<64 hex>", "nkey": "U…", "rooms": ["living"], "owns": ["living"]}]
//	}
//
// A leaf node has "mode": "leaf" and, instead of "cluster",
// "leaf": {"urls": ["10.0.0.9:7422"], "domain": "airlock", "replicas": 3}; it authenticates to the hub with the
// host's nkey seed and keeps no JetStream store of its own.

// FabricVersion is the only version of the fabric file this package reads.
const FabricVersion = 1

// MaxFabricBytes bounds a fabric file.
const MaxFabricBytes = 1 << 20

// Bounds of a fabric file's lists.
const (
	maxRoutes    = 32
	maxLeafURLs  = 8
	maxUsers     = 1024
	maxUserRooms = 256
	maxNameBytes = 64
	maxPathBytes = 4096
)

// Fabric modes.
const (
	ModeCluster = "cluster"
	ModeLeaf    = "leaf"
)

// FabricFile is a fabric file as written. ParseFabric checks it; LoadFabric also reads the
// files it names.
type FabricFile struct {
	// Version must be FabricVersion.
	Version int `json:"version"`
	// Node is this node's server name, unique in the fabric: 1–64 of [A-Za-z0-9_-].
	Node string `json:"node"`
	// Mode is ModeCluster or ModeLeaf.
	Mode string `json:"mode"`
	// Listen is the client listener (IP:port). Empty keeps the loopback default; a
	// non-loopback address is served with TLS only.
	Listen string `json:"listen,omitempty"`
	// TLS names the fabric's CA and this node's certificate and key (PEM files).
	TLS FabricTLS `json:"tls"`
	// Cluster is required in cluster mode and refused in leaf mode.
	Cluster *FabricCluster `json:"cluster,omitempty"`
	// Leaf is required in leaf mode and refused in cluster mode.
	Leaf *FabricLeaf `json:"leaf,omitempty"`
	// Host is the airlockd host this node serves: its connection (and, in leaf mode, the
	// leaf connection to the hub) authenticates with this nkey seed.
	Host FabricHost `json:"host"`
	// Users are the hosts that may connect to this node, with the rooms they are members
	// of; HostPermissions turns each into its broker permissions. Empty in leaf mode (the
	// hub authorizes).
	Users []FabricUser `json:"users,omitempty"`
}

// FabricTLS names PEM files.
type FabricTLS struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// FabricCluster makes the node a member of a NATS cluster.
type FabricCluster struct {
	// Name is the cluster's name, the same on every node.
	Name string `json:"name"`
	// Listen is the route listener (IP:port), served with mutual TLS.
	Listen string `json:"listen"`
	// Routes are the peers' route listeners (IP:port), this node's own excepted.
	Routes []string `json:"routes,omitempty"`
	// LeafListen, when set, accepts leaf nodes (IP:port), with TLS.
	LeafListen string `json:"leafListen,omitempty"`
}

// JetStreamDomain is the JetStream domain of a cluster's nodes: its name. A leaf node's hosts
// reach the cluster's JetStream under it ($JS.<domain>.API); the cluster's own clients use
// the plain API as well.
func (c *FabricCluster) JetStreamDomain() string { return c.Name }

// FabricLeaf makes the node a leaf node of an existing deployment.
type FabricLeaf struct {
	// URLs are the hub's leaf listeners (IP:port or host:port), dialled with TLS.
	URLs []string `json:"urls"`
	// Domain is the hub's JetStream domain (an airlock cluster's name), under which this
	// node's hosts use the hub's JetStream.
	Domain string `json:"domain"`
	// Replicas is how many copies of a bucket this node's host creates keeps in the hub's
	// JetStream: 1 to 5, at most the hub cluster's size. Zero means 1.
	Replicas int `json:"replicas,omitempty"`
}

// FabricHost is the host this node serves.
type FabricHost struct {
	// ID is the host's room identity (64 lowercase hex).
	ID string `json:"id"`
	// Seed is the file holding the host's nkey user seed (mode 0600).
	Seed string `json:"seed"`
}

// FabricUser is one host allowed on the node.
type FabricUser struct {
	// Host is the host id (64 lowercase hex).
	Host string `json:"host"`
	// Nkey is the host's nkey user public key ("U…").
	Nkey string `json:"nkey"`
	// Rooms are the rooms the host is a member of.
	Rooms []string `json:"rooms,omitempty"`
	// Owns are the rooms whose roster the host writes (its own rooms); each is also in
	// Rooms.
	Owns []string `json:"owns,omitempty"`
}

// Codes of a *FabricError.
const (
	// CodeFabricMalformed: the file is not one JSON object of the fabric format.
	CodeFabricMalformed = "fabric_malformed"
	// CodeFabricVersion: the file's version is not FabricVersion.
	CodeFabricVersion = "fabric_version"
	// CodeFabricInvalid: a member's value is refused; Field names it.
	CodeFabricInvalid = "fabric_invalid"
	// CodeFabricFile: a file the fabric names cannot be read or used.
	CodeFabricFile = "fabric_file"
)

// FabricError is a refused fabric file. Its Is compares codes, and it also matches ErrConfig.
type FabricError struct {
	Code   string
	Field  string // the member concerned, as a JSON path ("cluster.routes[1]"), or ""
	Detail string
	Err    error // the cause, if any
}

func (e *FabricError) Error() string {
	s := "bus: fabric: " + e.Code
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *FabricError) Unwrap() error { return e.Err }

// Is matches a *FabricError of the same code, and ErrConfig.
func (e *FabricError) Is(target error) bool {
	if target == ErrConfig {
		return true
	}
	var t *FabricError
	return errors.As(target, &t) && t.Code == e.Code
}

func invalid(field, format string, args ...any) error {
	return &FabricError{Code: CodeFabricInvalid, Field: field, Detail: fmt.Sprintf(format, args...)}
}

// ParseFabric decodes and checks a fabric file without touching the files it names.
func ParseFabric(data []byte) (*FabricFile, error) {
	if len(data) > MaxFabricBytes {
		return nil, &FabricError{Code: CodeFabricMalformed, Detail: fmt.Sprintf("%d bytes (at most %d)", len(data), MaxFabricBytes)}
	}
	var f FabricFile
	if err := ndjson.Decode(data, &f, ndjson.Closed); err != nil {
		return nil, &FabricError{Code: CodeFabricMalformed, Err: err}
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

func (f *FabricFile) check() error {
	if f.Version != FabricVersion {
		return &FabricError{Code: CodeFabricVersion, Detail: fmt.Sprintf("version %d (this airlock reads %d)", f.Version, FabricVersion)}
	}
	if !validServerName(f.Node) {
		return invalid("node", "want 1–64 of [A-Za-z0-9_-]")
	}
	if f.Listen != "" {
		if _, err := parseHostPort(f.Listen); err != nil {
			return invalid("listen", "%v", err)
		}
	}
	for field, p := range map[string]string{"tls.ca": f.TLS.CA, "tls.cert": f.TLS.Cert, "tls.key": f.TLS.Key, "host.seed": f.Host.Seed} {
		if p == "" || len(p) > maxPathBytes {
			return invalid(field, "want a file path")
		}
	}
	if !validHostID(f.Host.ID) {
		return invalid("host.id", "want 64 lowercase hex")
	}
	switch f.Mode {
	case ModeCluster:
		if f.Leaf != nil {
			return invalid("leaf", "not allowed in cluster mode")
		}
		if err := f.checkCluster(); err != nil {
			return err
		}
		if len(f.Users) == 0 {
			return invalid("users", "a cluster node needs its users")
		}
	case ModeLeaf:
		if f.Cluster != nil {
			return invalid("cluster", "not allowed in leaf mode")
		}
		if f.Leaf == nil || len(f.Leaf.URLs) == 0 || len(f.Leaf.URLs) > maxLeafURLs {
			return invalid("leaf.urls", "want 1 to %d hub URLs", maxLeafURLs)
		}
		for i, u := range f.Leaf.URLs {
			if _, _, err := net.SplitHostPort(u); err != nil || len(u) > 255 {
				return invalid(fmt.Sprintf("leaf.urls[%d]", i), "want host:port")
			}
		}
		if !validServerName(f.Leaf.Domain) {
			return invalid("leaf.domain", "want the hub's JetStream domain")
		}
		if f.Leaf.Replicas < 0 || f.Leaf.Replicas > 5 {
			return invalid("leaf.replicas", "want 1 to 5")
		}
		if len(f.Users) != 0 {
			return invalid("users", "a leaf node has none (the hub authorizes)")
		}
	default:
		return invalid("mode", "want %q or %q", ModeCluster, ModeLeaf)
	}
	return f.checkUsers()
}

func (f *FabricFile) checkCluster() error {
	c := f.Cluster
	if c == nil {
		return invalid("cluster", "required in cluster mode")
	}
	if !validServerName(c.Name) {
		return invalid("cluster.name", "want 1–64 of [A-Za-z0-9_-]")
	}
	own, err := parseHostPort(c.Listen)
	if err != nil {
		return invalid("cluster.listen", "%v", err)
	}
	if len(c.Routes) > maxRoutes {
		return invalid("cluster.routes", "at most %d", maxRoutes)
	}
	seen := map[netip.AddrPort]bool{own: true}
	for i, r := range c.Routes {
		ap, err := parseHostPort(r)
		if err != nil {
			return invalid(fmt.Sprintf("cluster.routes[%d]", i), "%v", err)
		}
		if seen[ap] {
			return invalid(fmt.Sprintf("cluster.routes[%d]", i), "repeats %s", ap)
		}
		seen[ap] = true
	}
	if c.LeafListen != "" {
		if _, err := parseHostPort(c.LeafListen); err != nil {
			return invalid("cluster.leafListen", "%v", err)
		}
	}
	return nil
}

func (f *FabricFile) checkUsers() error {
	if len(f.Users) > maxUsers {
		return invalid("users", "at most %d", maxUsers)
	}
	hosts, keys := map[string]bool{}, map[string]bool{}
	for i, u := range f.Users {
		field := fmt.Sprintf("users[%d]", i)
		if !validHostID(u.Host) {
			return invalid(field+".host", "want 64 lowercase hex")
		}
		if !nkeys.IsValidPublicUserKey(u.Nkey) {
			return invalid(field+".nkey", "want an nkey user public key")
		}
		if hosts[u.Host] || keys[u.Nkey] {
			return invalid(field, "repeats a host or an nkey")
		}
		hosts[u.Host], keys[u.Nkey] = true, true
		if len(u.Rooms) > maxUserRooms {
			return invalid(field+".rooms", "at most %d", maxUserRooms)
		}
		for j, r := range u.Rooms {
			if !validRoomToken(r) || slices.Index(u.Rooms, r) != j {
				return invalid(fmt.Sprintf("%s.rooms[%d]", field, j), "want a room id, once")
			}
		}
		for j, r := range u.Owns {
			if !slices.Contains(u.Rooms, r) || slices.Index(u.Owns, r) != j {
				return invalid(fmt.Sprintf("%s.owns[%d]", field, j), "want one of the user's rooms, once")
			}
		}
	}
	return nil
}

// ClusterSize is the number of nodes of the cluster this file joins (1 in leaf mode).
func (f *FabricFile) ClusterSize() int {
	if f.Cluster == nil {
		return 1
	}
	return len(f.Cluster.Routes) + 1
}

// Replicas is how many copies of a bucket a host on this node creates keeps: min(3, cluster
// size) in a cluster, and the configured count (default 1) on a leaf node.
func (f *FabricFile) Replicas() int {
	if f.Mode == ModeLeaf {
		return max(f.Leaf.Replicas, 1)
	}
	return min(3, f.ClusterSize())
}

// parseHostPort parses IP:port with a port from 1 to 65535 (a fabric's addresses are known
// to its peers, so none is random).
func parseHostPort(s string) (netip.AddrPort, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want IP:port")
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, fmt.Errorf("want an IP address, not %q", host)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return netip.AddrPort{}, fmt.Errorf("want a port from 1 to 65535")
	}
	return netip.AddrPortFrom(addr, uint16(port)), nil
}

func validServerName(s string) bool {
	if len(s) == 0 || len(s) > maxNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validHostID: 64 lowercase hex, the room layer's host id grammar.
func validHostID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validRoomToken: the room layer's room id grammar, ^[a-z0-9][a-z0-9_-]{0,63}$, which is also
// one subject token.
func validRoomToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')
		if !ok {
			return false
		}
	}
	return true
}
