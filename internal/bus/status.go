package bus

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// FabricStatus is a node's view of its fabric, read from the embedded server's own monitoring
// (no HTTP listener): what `airlock fabric status` shows. It holds names, addresses and
// counts, never a key or a seed.
type FabricStatus struct {
	// Node is this server's name; Mode is "cluster", "leaf" or "local" (no fabric).
	Node string `json:"node"`
	Mode string `json:"mode"`
	// Cluster is the cluster's name ("" outside a cluster).
	Cluster string `json:"cluster,omitempty"`
	// ClientURL is where clients connect.
	ClientURL string `json:"clientUrl,omitempty"`
	// Routes are this node's live routes to its peers.
	Routes []RouteStatus `json:"routes"`
	// Leaves are the live leaf connections, to the hub (leaf mode) or from leaves.
	Leaves []LeafStatus `json:"leaves"`
	// JetStream is the health of JetStream as this node sees it.
	JetStream JetStreamStatus `json:"jetstream"`
	// Connections is how many clients are connected to this node.
	Connections int `json:"connections"`
	// Certificate is when this node's TLS certificate and the fabric's CA expire; absent
	// without a fabric (mode local).
	Certificate *CertificateStatus `json:"certificate,omitempty"`
}

// CertificateStatus is when a fabric node's certificate and its fabric's CA stop being
// valid. Past either, the node's peers refuse its routes and leaf connections: write the
// fabric again (airlock fabric init) before then.
type CertificateStatus struct {
	NotAfter   time.Time `json:"notAfter"`
	CANotAfter time.Time `json:"caNotAfter"`
}

// ExpiryWarning is how long before a certificate's expiry status and airlockd's log warn.
const ExpiryWarning = 30 * 24 * time.Hour

// RouteStatus is one route.
type RouteStatus struct {
	// Peer is the peer's server name; Addr its address.
	Peer string `json:"peer"`
	Addr string `json:"addr"`
	// RTT is the last measured round trip, in microseconds (0: not measured yet).
	RTTMicros int64 `json:"rttMicros"`
	// Solicited: this node dialled the route (it is in this node's routes list).
	Solicited bool `json:"solicited"`
}

// LeafStatus is one leaf connection.
type LeafStatus struct {
	Name      string `json:"name"`
	Addr      string `json:"addr"`
	RTTMicros int64  `json:"rttMicros"`
	// Hub: this node dialled it (this node is the leaf).
	Hub bool `json:"hub"`
}

// JetStreamStatus is JetStream's health on a node.
type JetStreamStatus struct {
	// Enabled: this node runs JetStream (a leaf node uses its hub's).
	Enabled bool `json:"enabled"`
	// Leader is the meta leader's name ("" while there is none: no quorum).
	Leader string `json:"leader,omitempty"`
	// IsLeader: this node is the meta leader.
	IsLeader bool `json:"isLeader"`
	// ClusterSize is the meta group's known size; Peers are its other members as the leader
	// sees them (on the leader only: followers do not track each other).
	ClusterSize int          `json:"clusterSize,omitempty"`
	Peers       []PeerStatus `json:"peers,omitempty"`
	// Streams and Messages are this node's counts.
	Streams  int    `json:"streams"`
	Messages uint64 `json:"messages"`
}

// PeerStatus is one meta group peer other than the leader.
type PeerStatus struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline"`
	// ActiveMillis is how long ago the leader last heard from it.
	ActiveMillis int64  `json:"activeMillis"`
	Lag          uint64 `json:"lag"`
}

// Status reads the node's status from its monitoring, in process.
func (s *Server) Status() (FabricStatus, error) {
	st := FabricStatus{Node: s.ns.Name(), Mode: "local", Routes: []RouteStatus{}, Leaves: []LeafStatus{}}
	if s.fabric != nil {
		st.Mode = s.fabric.File.Mode
		cert, ca := s.fabric.Expiry()
		st.Certificate = &CertificateStatus{NotAfter: cert.UTC(), CANotAfter: ca.UTC()}
	}
	st.ClientURL = s.ClientURL()
	st.Cluster = s.ns.ClusterName()
	st.Connections = s.ns.NumClients()
	rz, err := s.ns.Routez(&server.RoutezOptions{})
	if err != nil {
		return st, fmt.Errorf("bus: status: routes: %w", err)
	}
	for _, r := range rz.Routes {
		st.Routes = append(st.Routes, RouteStatus{Peer: r.RemoteName, Addr: fmt.Sprintf("%s:%d", r.IP, r.Port),
			RTTMicros: rttMicros(r.RTT), Solicited: r.DidSolicit})
	}
	slices.SortFunc(st.Routes, func(a, b RouteStatus) int { return strings.Compare(a.Peer+a.Addr, b.Peer+b.Addr) })
	// Pooled routes (several connections per peer) show once per peer.
	st.Routes = slices.CompactFunc(st.Routes, func(a, b RouteStatus) bool { return a.Peer == b.Peer })
	lz, err := s.ns.Leafz(&server.LeafzOptions{})
	if err != nil {
		return st, fmt.Errorf("bus: status: leaves: %w", err)
	}
	for _, l := range lz.Leafs {
		st.Leaves = append(st.Leaves, LeafStatus{Name: l.Name, Addr: fmt.Sprintf("%s:%d", l.IP, l.Port),
			RTTMicros: rttMicros(l.RTT), Hub: l.IsSpoke})
	}
	jz, err := s.ns.Jsz(&server.JSzOptions{})
	if err != nil {
		return st, fmt.Errorf("bus: status: jetstream: %w", err)
	}
	st.JetStream.Enabled = !jz.Disabled && s.ns.JetStreamEnabled()
	st.JetStream.Streams, st.JetStream.Messages = jz.Streams, jz.Messages
	if m := jz.Meta; m != nil {
		st.JetStream.Leader, st.JetStream.ClusterSize = m.Leader, m.Size
		// Only the leader keeps its peers' state current; a follower's copy is stale.
		st.JetStream.IsLeader = m.Leader == st.Node
		for _, p := range m.Replicas {
			if !st.JetStream.IsLeader {
				break
			}
			st.JetStream.Peers = append(st.JetStream.Peers, PeerStatus{Name: p.Name, Current: p.Current, Offline: p.Offline,
				ActiveMillis: p.Active.Milliseconds(), Lag: p.Lag})
		}
	}
	return st, nil
}

// MetaGroup is the name Groups gives the JetStream meta group.
const MetaGroup = "$meta"

// Groups maps the JetStream groups this node takes part in to the name of the leader it knows
// of, "" while it knows none: MetaGroup for the meta group, and "ACCOUNT > STREAM" for each
// stream this node holds a replica of. It is read from the server's own monitoring, in
// process.
//
// A JetStream request that a group's leader would answer gets no answer at all while that
// group elects one (after its leader's node was killed or restarted, NATS waits an election
// timeout of seconds), so a request that went unanswered is worth sending again as soon as the
// group it met leaderless has a leader: the event roomhost's retries wait for.
func (s *Server) Groups() (map[string]string, error) {
	jz, err := s.ns.Jsz(&server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		return nil, fmt.Errorf("bus: status: jetstream: %w", err)
	}
	out := map[string]string{}
	if jz.Meta != nil {
		out[MetaGroup] = jz.Meta.Leader
	}
	for _, a := range jz.AccountDetails {
		for _, sd := range a.Streams {
			if sd.Cluster != nil {
				out[a.Name+" > "+sd.Name] = sd.Cluster.Leader
			}
		}
	}
	return out, nil
}

// rttMicros parses the monitoring's RTT text ("1.234ms"); unparsable or empty is 0.
func rttMicros(s string) int64 {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d.Microseconds()
}

// expiryText says when a certificate expires, loudly once it is within ExpiryWarning.
func expiryText(notAfter, now time.Time) string {
	left := notAfter.Sub(now)
	date := notAfter.UTC().Format(time.DateOnly)
	switch {
	case left <= 0:
		return "EXPIRED on " + date + " (write the fabric again: airlock fabric init)"
	case left < ExpiryWarning:
		return fmt.Sprintf("EXPIRES on %s, in %d days (write the fabric again: airlock fabric init)", date, int(left.Hours()/24))
	default:
		return fmt.Sprintf("valid until %s (%d days)", date, int(left.Hours()/24))
	}
}

// WriteStatus writes st for a terminal.
func WriteStatus(w io.Writer, st FabricStatus) error {
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "node %s (%s)", st.Node, st.Mode)
	if st.Cluster != "" {
		fmt.Fprintf(&b, ", cluster %s", st.Cluster)
	}
	fmt.Fprintf(&b, ", %d connections\n", st.Connections)
	if c := st.Certificate; c != nil {
		fmt.Fprintf(&b, "certificate: %s; CA: %s\n", expiryText(c.NotAfter, now), expiryText(c.CANotAfter, now))
	}
	for _, r := range st.Routes {
		fmt.Fprintf(&b, "route  %-16s %-22s rtt %s\n", r.Peer, r.Addr, time.Duration(r.RTTMicros)*time.Microsecond)
	}
	for _, l := range st.Leaves {
		role := "leaf"
		if l.Hub {
			role = "hub"
		}
		fmt.Fprintf(&b, "%-6s %-16s %-22s rtt %s\n", role, l.Name, l.Addr, time.Duration(l.RTTMicros)*time.Microsecond)
	}
	js := st.JetStream
	switch {
	case !js.Enabled:
		b.WriteString("jetstream: not on this node\n")
	case js.ClusterSize > 0 && js.Leader == "":
		fmt.Fprintf(&b, "jetstream: NO LEADER (cluster of %d), %d streams\n", js.ClusterSize, js.Streams)
	case js.Leader == "":
		// Not clustered: the node's JetStream has no meta group and no leader.
		fmt.Fprintf(&b, "jetstream: this node alone, %d streams, %d messages\n", js.Streams, js.Messages)
	default:
		fmt.Fprintf(&b, "jetstream: leader %s, cluster of %d, %d streams, %d messages\n", js.Leader, max(js.ClusterSize, 1), js.Streams, js.Messages)
	}
	for _, p := range js.Peers {
		state := "current"
		switch {
		case p.Offline:
			state = "OFFLINE"
		case !p.Current:
			state = "behind"
		}
		fmt.Fprintf(&b, "  peer %-16s %s, lag %d, seen %dms ago\n", p.Name, state, p.Lag, p.ActiveMillis)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
