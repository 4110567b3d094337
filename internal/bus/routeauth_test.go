package bus_test

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rogueDeadline bounds one rogue route's whole conversation with n1.
const rogueDeadline = 10 * time.Second

// rogueRoute dials n1's route listener from the local address from, with the certificate and
// key of node certNode (0-based), and speaks the route protocol: CONNECT as user, then n1's
// own INFO with another server id and the server name name, then PING, and answers its
// PINGs. It returns every line n1 sent after its INFO, until n1 closed the connection (closed
// true) or the deadline.
func rogueRoute(t *testing.T, tf *testFabric, from string, certNode int, user, name string) (lines []string, closed bool) {
	t.Helper()
	dir := filepath.Join(tf.dir, fmt.Sprintf("n%d", certNode+1))
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "node.pem"), filepath.Join(dir, "node-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	addr := net.JoinHostPort(nodeIPs[0], strconv.Itoa(tf.ports[1]))
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		RootCAs: tf.ca, ServerName: nodeIPs[0]})
	if err != nil {
		t.Fatalf("rogue route from %s: %v", from, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(rogueDeadline)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(conn, 64<<10)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("n1's first line %q: %v", line, err)
	}
	var info map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), "INFO ")), &info); err != nil {
		t.Fatal(err)
	}
	info["server_id"], info["name"], info["server_name"] = "NROGUE"+strings.Repeat("X", 50), name, name
	delete(info, "nonce")
	info["compression"], info["host"], info["connect_urls"] = "off", from, []string{}
	infoJSON, _ := json.Marshal(info)
	connect, _ := json.Marshal(map[string]any{"echo": true, "verbose": false, "pedantic": false, "user": user, "tls_required": true,
		"name": "NROGUE" + strings.Repeat("X", 50), "headers": true, "cluster": info["cluster"], "lnoc": true, "ln": true})
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nINFO %s\r\nPING\r\n", connect, infoJSON); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			lines = append(lines, strings.TrimSpace(line))
		}
		if line == "PING\r\n" {
			_, _ = conn.Write([]byte("PONG\r\n"))
		}
		if err != nil {
			var ne net.Error
			return lines, !errors.As(err, &ne) || !ne.Timeout()
		}
		// Traffic: n1 took the rogue for a route (interest, messages, RAFT).
		if len(lines) > 200 {
			return lines, false
		}
	}
}

// TestFabricRouteRefusesRogue: with node n2's certificate and key, a route to n1 is refused
// from an address that is not n2's (127.0.0.5, or n3's 127.0.0.4), under another name than
// n2's ("rogue", n3's, none), and with n1's own certificate: n1 answers each with an
// authorization error and closes, and sends it nothing else — no interest, no message, no
// RAFT. The real cluster forms and keeps its routes. (On a loopback fabric a node's routes
// come from 127.0.0.1, Linux's source address for 127.0.0.0/8: the cases from 127.0.0.1 are
// refused for their name or certificate alone.)
func TestFabricRouteRefusesRogue(t *testing.T) {
	tf := newTestFabric(t)
	var nodes []*node
	for i := range nodeIPs {
		nodes = append(nodes, tf.start(t, i, t.TempDir()))
	}
	for _, n := range nodes {
		waitFormed(t, n.srv, 2)
	}
	for _, tc := range []struct {
		name, from   string
		cert         int
		user, server string
	}{
		{"n2's identity from an unknown address", "127.0.0.5", 1, "n2", "n2"},
		{"n2's identity from n3's address", nodeIPs[2], 1, "n2", "n2"},
		{"n2's certificate named rogue", "127.0.0.5", 1, "rogue", "rogue"},
		{"n2's certificate named rogue from loopback", "127.0.0.1", 1, "rogue", "rogue"},
		{"n2's certificate as n3", "127.0.0.1", 1, "n3", "n3"},
		{"n2's certificate without a name", "127.0.0.1", 1, "", "n2"},
		{"n1's own certificate", "127.0.0.1", 0, "n1", "n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines, closed := rogueRoute(t, tf, tc.from, tc.cert, tc.user, tc.server)
			if !closed || len(lines) != 1 || lines[0] != "-ERR 'Authorization Violation'" {
				t.Fatalf("n1 did not refuse the route (closed %v) and sent it %d lines: %.400q", closed, len(lines), lines)
			}
		})
	}
	for i, n := range nodes {
		st, err := n.srv.Status()
		if err != nil {
			t.Fatal(err)
		}
		var peers []string
		for _, r := range st.Routes {
			peers = append(peers, r.Peer)
		}
		if want := map[int]string{0: "n2,n3", 1: "n1,n3", 2: "n1,n2"}[i]; strings.Join(peers, ",") != want {
			t.Errorf("n%d's routes after the rogues: %v, want %s", i+1, peers, want)
		}
	}
}
