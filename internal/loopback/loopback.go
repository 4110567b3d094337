// Package loopback says whether a host or an address names this machine's loopback
// interface: the check every listener that is loopback-only by default (the web page, the
// metrics, airlock mcp --http) makes of its address and of each request's Host.
package loopback

import (
	"net"
	"net/netip"
	"strings"
)

// Host reports whether host is "localhost" (in any case) or a loopback IP address
// (127.0.0.0/8, ::1, or 127.x mapped into IPv6).
func Host(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Addr reports whether the host of addr (host:port) is a loopback host (Host); an addr
// without a port is not.
func Addr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Host(host)
}
