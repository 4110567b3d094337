package bus

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// tlsTimeout bounds a TLS handshake of a client, route or leaf connection, in seconds: a
// handshake across sites is a few round trips.
const tlsTimeout = 5

// Fabric is a loaded fabric file: checked, with its TLS material and the host's nkey read.
// The nkey seed stays in memory; nothing prints it.
type Fabric struct {
	// File is the checked file.
	File *FabricFile
	// serverTLS serves every listener; dialTLS dials routes, the hub and other nodes.
	serverTLS, dialTLS *tls.Config
	user               nkeys.KeyPair
	userPub            string
	// certNotAfter and caNotAfter are when this node's certificate and the fabric's CA (the
	// first of its certificates to expire) stop being valid.
	certNotAfter, caNotAfter time.Time
}

// Expiry is when this node's certificate, and the fabric's CA, stop being valid: past either,
// its peers refuse its routes and leaf connections.
func (fb *Fabric) Expiry() (cert, ca time.Time) { return fb.certNotAfter, fb.caNotAfter }

// ExpiresSoon reports whether the node's certificate or the CA expires within ExpiryWarning
// of now: airlockd warns at start.
func (fb *Fabric) ExpiresSoon(now time.Time) bool {
	return fb.certNotAfter.Sub(now) < ExpiryWarning || fb.caNotAfter.Sub(now) < ExpiryWarning
}

// LoadFabric reads and checks the fabric file at path and the files it names.
func LoadFabric(path string) (*Fabric, error) {
	data, err := readBounded(path, MaxFabricBytes)
	if err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: path, Err: err}
	}
	f, err := ParseFabric(data)
	if err != nil {
		return nil, err
	}
	return openFabric(f, filepath.Dir(path))
}

// openFabric loads f's files, relative to dir.
func openFabric(f *FabricFile, dir string) (*Fabric, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	caPEM, err := readBounded(abs(f.TLS.CA), 64<<10)
	if err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "tls.ca", Err: err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, &FabricError{Code: CodeFabricFile, Field: "tls.ca", Detail: "no PEM certificate"}
	}
	if err := checkPrivate(abs(f.TLS.Key)); err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "tls.key", Err: err}
	}
	cert, err := tls.LoadX509KeyPair(abs(f.TLS.Cert), abs(f.TLS.Key))
	if err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "tls.cert", Err: err}
	}
	if err := checkPrivate(abs(f.Host.Seed)); err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "host.seed", Err: err}
	}
	seed, err := readBounded(abs(f.Host.Seed), 4<<10)
	if err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "host.seed", Err: err}
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, &FabricError{Code: CodeFabricFile, Field: "host.seed", Detail: "not an nkey seed"}
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, &FabricError{Code: CodeFabricFile, Field: "host.seed", Detail: "not an nkey user seed"}
	}
	if f.Mode == ModeCluster && !hasUser(f, f.Host.ID, pub) {
		return nil, invalid("users", "no user for this node's host (host.id with the seed's public key)")
	}
	if f.Mode == ModeCluster {
		if err := checkNodeCert(f, cert, pool, time.Now()); err != nil {
			return nil, err
		}
	}
	fb := &Fabric{File: f, user: kp, userPub: pub, caNotAfter: earliestExpiry(caPEM)}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		fb.certNotAfter = leaf.NotAfter
	}
	fb.serverTLS = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		RootCAs:      pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	fb.dialTLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return fb, nil
}

// earliestExpiry is the earliest NotAfter of the PEM certificates in data, or zero when none
// parses.
func earliestExpiry(data []byte) time.Time {
	var first time.Time
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return first
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err == nil && (first.IsZero() || c.NotAfter.Before(first)) {
			first = c.NotAfter
		}
	}
}

func hasUser(f *FabricFile, host, nkey string) bool {
	for _, u := range f.Users {
		if u.Host == host && u.Nkey == nkey {
			return true
		}
	}
	return false
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, nil
}

// checkPrivate refuses a secret file that others may read.
func checkPrivate(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o; a key file must be 0600", path, fi.Mode().Perm())
	}
	return nil
}

// Replicas is how many copies of a bucket a host on this node creates keeps.
func (fb *Fabric) Replicas() int { return fb.File.Replicas() }

// HostID is the id of the host this node serves.
func (fb *Fabric) HostID() string { return fb.File.Host.ID }

// DialConfig is the configuration of the host's connection to s, the server started with fb:
// in process, as the host's nkey user, with the host's inbox prefix and the fabric's replicas.
func (fb *Fabric) DialConfig(s *Server) DialConfig {
	cfg := DialConfig{Server: s, Name: fb.File.Host.ID, InboxPrefix: InboxPrefix(fb.File.Host.ID), Replicas: fb.Replicas()}
	if fb.File.Mode == ModeLeaf {
		cfg.JetStreamDomain = fb.File.Leaf.Domain
	}
	if fb.File.Mode == ModeCluster {
		// A leaf node has no users of its own (the hub authorizes its leaf connection), so
		// the host connects to it without credentials.
		cfg.Nkey = fb.user
	}
	return cfg
}

// RemoteDialConfig is the configuration of the host's connection to another node's client
// listener at url (nats://IP:port), with TLS verified against the fabric's CA.
func (fb *Fabric) RemoteDialConfig(url string) DialConfig {
	cfg := DialConfig{URL: url, Name: fb.File.Host.ID, InboxPrefix: InboxPrefix(fb.File.Host.ID),
		Replicas: fb.Replicas(), Nkey: fb.user, TLS: fb.dialTLS.Clone()}
	if fb.File.Mode == ModeLeaf {
		cfg.JetStreamDomain = fb.File.Leaf.Domain
	}
	return cfg
}

// apply makes opts a node of the fabric.
func (fb *Fabric) apply(opts *server.Options) error {
	f := fb.File
	opts.ServerName = f.Node
	if f.Listen != "" {
		ap, _ := parseHostPort(f.Listen)
		opts.Host, opts.Port = ap.Addr().String(), int(ap.Port())
		// A fabric's client listener is there for other machines' hosts, so it is served
		// with TLS even on a loopback address (tests run fabrics on 127.0.0.2–4). Clients
		// authenticate with their nkey; TLS protects the link and the server's certificate
		// proves the node. A client certificate is not required.
		cfg := fb.serverTLS.Clone()
		cfg.ClientAuth = tls.NoClientCert
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = cfg, true, tlsTimeout
	}
	if f.Mode == ModeCluster {
		c := f.Cluster
		ap, _ := parseHostPort(c.Listen)
		opts.Cluster.Name = c.Name
		opts.JetStreamDomain = c.JetStreamDomain()
		opts.Cluster.Host, opts.Cluster.Port = ap.Addr().String(), int(ap.Port())
		// Routes are mutually authenticated by certificates of the fabric's CA, and a route
		// carries every message of the cluster, so an accepted route must also be one of the
		// configured nodes, from its own address, under its own name (routeAuth). This node
		// dials its routes as the user named after it; the dialled peer's certificate must
		// carry the address dialled (TLS verifies it).
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = fb.serverTLS.Clone(), tlsTimeout
		opts.CustomRouterAuthentication = newRouteAuth(c)
		for _, r := range c.Routes {
			opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats-route", User: url.User(f.Node), Host: r})
		}
		if c.LeafListen != "" {
			lp, _ := parseHostPort(c.LeafListen)
			opts.LeafNode.Host, opts.LeafNode.Port = lp.Addr().String(), int(lp.Port())
			// A leaf authenticates as a user (its host's nkey) and gets that user's
			// permissions; TLS protects the link. Leaves need no certificate of ours.
			cfg := fb.serverTLS.Clone()
			cfg.ClientAuth = tls.NoClientCert
			opts.LeafNode.TLSConfig, opts.LeafNode.TLSTimeout = cfg, tlsTimeout
		}
		opts.Nkeys = nkeyUsers(f.Users, c.JetStreamDomain())
		return nil
	}
	// Leaf mode: the hub's JetStream keeps the buckets, so this node keeps none of its own
	// and JetStream requests travel to the hub.
	opts.JetStream = false
	// Without the hint a leaf without JetStream denies its clients the hub's JetStream API.
	opts.JetStreamExtHint = "will_extend"
	seed, err := fb.user.Seed()
	if err != nil {
		return &FabricError{Code: CodeFabricFile, Field: "host.seed", Err: err}
	}
	// The leaf authenticates to the hub as the host's nkey user (RemoteLeafOpts.Nkey is the
	// seed, kept in the server's memory only), so the hub applies the host's permissions to
	// everything the leaf carries.
	remote := &server.RemoteLeafOpts{TLS: true, TLSConfig: fb.dialTLS.Clone(), TLSTimeout: tlsTimeout, Nkey: string(seed)}
	for _, u := range f.Leaf.URLs {
		remote.URLs = append(remote.URLs, &url.URL{Scheme: "nats-leaf", Host: u})
	}
	opts.LeafNode.Remotes = []*server.RemoteLeafOpts{remote}
	return nil
}

// nkeyUsers turns fabric users into the server's nkey users with their permissions.
func nkeyUsers(users []FabricUser, domain string) []*server.NkeyUser {
	out := make([]*server.NkeyUser, 0, len(users))
	for _, u := range users {
		rooms := make([]Membership, 0, len(u.Rooms))
		for _, r := range u.Rooms {
			rooms = append(rooms, Membership{Room: r, Owner: contains(u.Owns, r)})
		}
		perms := withDomain(HostPermissions(DefaultRoomScheme, u.Host, rooms), domain)
		out = append(out, &server.NkeyUser{Nkey: u.Nkey, Permissions: perms})
	}
	return out
}

// SetUsers replaces the users of a cluster node, and with them their permissions, without a
// restart: a host that joined or left a room gets its new permissions on its next message
// (the server re-evaluates its connected clients). users are checked as a fabric file's are,
// and must still include the node's own host.
//
// On a local server (ServerConfig.Host) it sets the hosts that may connect, the embedding
// host among them.
func (s *Server) SetUsers(users []FabricUser) error {
	if s.local != nil {
		return s.setLocalUsers(users)
	}
	if s.fabric == nil || s.fabric.File.Mode != ModeCluster {
		return fmt.Errorf("%w: only a cluster node has users", ErrConfig)
	}
	f := *s.fabric.File
	f.Users = users
	if err := f.checkUsers(); err != nil {
		return err
	}
	if len(users) == 0 || !hasUser(&f, f.Host.ID, s.fabric.userPub) {
		return invalid("users", "no user for this node's host")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.opts.Clone()
	next.Nkeys = nkeyUsers(users, f.Cluster.JetStreamDomain())
	if err := s.ns.ReloadOptions(next); err != nil {
		return fmt.Errorf("bus: set users: %w", err)
	}
	s.opts = next
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// routeAuth authorizes an accepted route (server.Options.CustomRouterAuthentication, asked at
// the route's CONNECT, after TLS verified its certificate against the fabric's CA). The route
// is accepted only when:
//   - its certificate carries, as an IP SAN, the address of one of this node's configured
//     routes (a configured node; this node's own certificate is not one);
//   - it comes from that address — or, when that address is in 127.0.0.0/8, from 127.0.0.1,
//     the source Linux gives every connection to a loopback address, so a fabric on one
//     machine (the tests') can form;
//   - the user of its CONNECT, which a node sets to its own name, is a DNS SAN of the
//     certificate.
//
// So a node's key used from another address, or under another name, is refused.
type routeAuth struct {
	peers map[netip.Addr]bool // the IPs of this node's configured routes
}

func newRouteAuth(c *FabricCluster) *routeAuth {
	ra := &routeAuth{peers: make(map[netip.Addr]bool, len(c.Routes))}
	for _, r := range c.Routes {
		ap, err := parseHostPort(r)
		if err == nil { // checked by ParseFabric
			ra.peers[ap.Addr().Unmap()] = true
		}
	}
	return ra
}

// loopbackSource is where Linux connects from to any address of 127.0.0.0/8.
var loopbackSource = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Check implements server.Authentication.
func (ra *routeAuth) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.ROUTER {
		return false
	}
	st := c.GetTLSConnectionState()
	opts := c.GetOpts()
	if st == nil || len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 || opts == nil || opts.Username == "" {
		return false
	}
	cert := st.PeerCertificates[0]
	if !slices.Contains(cert.DNSNames, opts.Username) {
		return false
	}
	tcp, ok := c.RemoteAddress().(*net.TCPAddr)
	if !ok {
		return false
	}
	from := tcp.AddrPort().Addr().Unmap()
	for _, ip := range cert.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		a = a.Unmap()
		if ra.peers[a] && (from == a || a.Is4() && a.IsLoopback() && from == loopbackSource) {
			return true
		}
	}
	return false
}

// checkNodeCert refuses a cluster node's certificate that its peers would refuse as a route
// (TLS, routeAuth): it must be valid at now and signed by the fabric's CA (roots), name the
// node as a DNS SAN and, unless the route listener is on every address, carry the listener's
// IP.
func checkNodeCert(f *FabricFile, cert tls.Certificate, roots *x509.CertPool, now time.Time) error {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Err: err}
	}
	switch {
	case now.After(leaf.NotAfter):
		return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Detail: fmt.Sprintf("the certificate expired at %s: its peers would refuse its routes; write the fabric again (airlock fabric init)", leaf.NotAfter.UTC().Format(time.RFC3339))}
	case now.Before(leaf.NotBefore):
		return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Detail: fmt.Sprintf("the certificate is valid only from %s (is this machine's clock right?): its peers would refuse its routes", leaf.NotBefore.UTC().Format(time.RFC3339))}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Detail: "the certificate is not one of the fabric's CA (tls.ca): its peers would refuse its routes"}
	}
	if !slices.Contains(leaf.DNSNames, f.Node) {
		return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Detail: fmt.Sprintf("the certificate does not name node %q (a DNS SAN): its peers would refuse its routes", f.Node)}
	}
	ap, _ := parseHostPort(f.Cluster.Listen)
	if ap.Addr().IsUnspecified() {
		return nil
	}
	for _, ip := range leaf.IPAddresses {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap() == ap.Addr().Unmap() {
			return nil
		}
	}
	return &FabricError{Code: CodeFabricFile, Field: "tls.cert", Detail: fmt.Sprintf("the certificate does not carry the route listener's address %s (an IP SAN): its peers would refuse its routes", ap.Addr())}
}
