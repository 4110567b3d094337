package bus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"
)

// Default ports of a fabric node, NATS's own.
const (
	DefaultClientPort = 4222
	DefaultRoutePort  = 6222
)

// Validity of what InitFabric issues. A private CA of a handful of machines is renewed by
// running init again; ten years for the CA and two for a node keep renewal rare but real.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	nodeValidity = 2 * 365 * 24 * time.Hour
)

// FabricSpec describes a cluster for InitFabric.
type FabricSpec struct {
	// Cluster names the cluster.
	Cluster string
	// Nodes are the cluster's nodes, one per machine (at least one).
	Nodes []NodeSpec
	// ClientPort and RoutePort are every node's ports; zero means the defaults.
	ClientPort, RoutePort int
	// Rooms maps a room id to its members (node names); the first member owns it.
	Rooms map[string][]string
}

// NodeSpec is one node.
type NodeSpec struct {
	// Name is the node's (and its directory's) name.
	Name string
	// IP is the address the node listens on and its peers dial.
	IP string
	// Host is the id of the airlockd host on that machine.
	Host string
}

// InitFabric writes, under dir (created with mode 0700; it must not exist yet or be empty):
//
//	ca.pem, ca-key.pem      the fabric's private CA (ECDSA P-256); the key stays here
//	<node>/fabric.json      the node's fabric file
//	<node>/ca.pem           the CA certificate
//	<node>/node.pem         the node's certificate (its IP and name; server and client use)
//	<node>/node-key.pem     its key (0600)
//	<node>/host.nk          the nkey user seed of the node's host (0600)
//
// Each <node> directory is what goes to that machine. Every fabric file lists every host as a
// user, with the rooms spec gives it, so any node can serve any host.
func InitFabric(dir string, spec FabricSpec) error {
	if err := spec.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return &FabricError{Code: CodeFabricFile, Field: dir, Err: err}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		if err == nil {
			err = errors.New("not empty")
		}
		return &FabricError{Code: CodeFabricFile, Field: dir, Err: err}
	}
	// An empty directory that was there already is made 0700 too: the CA key goes in it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return &FabricError{Code: CodeFabricFile, Field: dir, Err: err}
	}
	clientPort, routePort := cmp0(spec.ClientPort, DefaultClientPort), cmp0(spec.RoutePort, DefaultRoutePort)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock fabric " + spec.Cluster + " CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := writeFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644); err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "ca-key.pem"), caKey); err != nil {
		return err
	}

	seeds := make(map[string][]byte, len(spec.Nodes))
	var users []FabricUser
	for _, n := range spec.Nodes {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		seeds[n.Name] = seed
		u := FabricUser{Host: n.Host, Nkey: pub}
		for _, r := range slices.Sorted(maps.Keys(spec.Rooms)) {
			if i := slices.Index(spec.Rooms[r], n.Name); i >= 0 {
				u.Rooms = append(u.Rooms, r)
				if i == 0 {
					u.Owns = append(u.Owns, r)
				}
			}
		}
		users = append(users, u)
	}
	for _, n := range spec.Nodes {
		nd := filepath.Join(dir, n.Name)
		if err := os.Mkdir(nd, 0o700); err != nil {
			return &FabricError{Code: CodeFabricFile, Field: nd, Err: err}
		}
		if err := writeFile(filepath.Join(nd, "ca.pem"), caPEM, 0o644); err != nil {
			return err
		}
		if err := writeNodeCert(nd, n, caCert, caKey, now); err != nil {
			return err
		}
		if err := writeFile(filepath.Join(nd, "host.nk"), append(seeds[n.Name], '\n'), 0o600); err != nil {
			return err
		}
		f := FabricFile{
			Version: FabricVersion, Node: n.Name, Mode: ModeCluster,
			Listen: net.JoinHostPort(n.IP, strconv.Itoa(clientPort)),
			TLS:    FabricTLS{CA: "ca.pem", Cert: "node.pem", Key: "node-key.pem"},
			Cluster: &FabricCluster{Name: spec.Cluster, Listen: net.JoinHostPort(n.IP, strconv.Itoa(routePort)),
				Routes: []string{}},
			Host:  FabricHost{ID: n.Host, Seed: "host.nk"},
			Users: users,
		}
		for _, p := range spec.Nodes {
			if p.Name != n.Name {
				f.Cluster.Routes = append(f.Cluster.Routes, net.JoinHostPort(p.IP, strconv.Itoa(routePort)))
			}
		}
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(filepath.Join(nd, "fabric.json"), append(data, '\n'), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (spec *FabricSpec) check() error {
	if !validServerName(spec.Cluster) {
		return invalid("cluster", "want 1–64 of [A-Za-z0-9_-]")
	}
	if len(spec.Nodes) == 0 || len(spec.Nodes) > maxRoutes+1 {
		return invalid("nodes", "want 1 to %d nodes", maxRoutes+1)
	}
	names, ips, hosts := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, n := range spec.Nodes {
		field := fmt.Sprintf("nodes[%d]", i)
		addr, err := netip.ParseAddr(n.IP)
		if !validServerName(n.Name) || err != nil || addr.Zone() != "" || !validHostID(n.Host) {
			return invalid(field, "want a name, an IP address and a host id")
		}
		if addr.IsUnspecified() || addr.IsMulticast() {
			// The node's certificate names this address and its peers dial it.
			return invalid(field, "the node's address is one its peers can reach, not %s", addr)
		}
		if names[n.Name] || ips[addr.String()] || hosts[n.Host] {
			return invalid(field, "repeats a name, an address or a host")
		}
		names[n.Name], ips[addr.String()], hosts[n.Host] = true, true, true
	}
	for r, members := range spec.Rooms {
		if !validRoomToken(r) || len(members) == 0 {
			return invalid("rooms."+r, "want a room id with members")
		}
		for _, m := range members {
			if !names[m] {
				return invalid("rooms."+r, "no node %q", m)
			}
		}
	}
	for _, p := range []int{spec.ClientPort, spec.RoutePort} {
		if p < 0 || p > 65535 {
			return invalid("ports", "want 1 to 65535")
		}
	}
	return nil
}

func writeNodeCert(nd string, n NodeSpec, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: n.Name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(nodeValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{n.Name},
		IPAddresses:  []net.IP{net.ParseIP(n.IP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(nd, "node.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(nd, "node-key.pem"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFile creates path (it must not exist) with mode perm.
func writeFile(path string, data []byte, perm os.FileMode) error {
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return &FabricError{Code: CodeFabricFile, Field: path, Err: err}
	}
	_, err = fh.Write(data)
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &FabricError{Code: CodeFabricFile, Field: path, Err: err}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("bus: reading randomness: " + err.Error())
	}
	return n
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
