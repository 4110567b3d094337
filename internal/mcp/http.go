package mcp

import (
	"crypto/rand"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one message of a client: an HTTP request body, or a line on stdio.
// It holds the largest tool call (an fs.write of 4 MiB of content, which JSON escaping can
// double) with room for the envelope.
const MaxMessageBytes = 9 << 20

// httpSessionIdle closes an MCP session over HTTP that has seen no request for this long, so
// that clients that vanish without a DELETE do not hold sessions forever.
const httpSessionIdle = 30 * time.Minute

// NewToken returns a fresh bearer token: 26 characters of crypto/rand base32 (130 bits).
func NewToken() string { return rand.Text() }

// HTTPConfig configures HTTPHandler.
type HTTPConfig struct {
	// Token is the bearer token every request must carry (Authorization: Bearer TOKEN).
	Token string
	// Port is the listening port: the only port a Host or Origin may name.
	Port string
}

// HTTPHandler returns the bridge's Streamable HTTP handler (the SDK's, one MCP session per
// client), behind three checks, in this order:
//
//   - Host must be an IP literal or "localhost", with the listening port. DNS rebinding needs
//     a DNS name that resolves to this host, so such a name is refused (403).
//   - Origin, when a browser sends one, must be http:// with such a host (403 otherwise), so a
//     web page elsewhere cannot drive the server even with a rebinding name.
//   - Authorization must be "Bearer " and the token, compared in constant time (401).
//
// Bodies are bounded by MaxMessageBytes (413).
func (b *Bridge) HTTPHandler(cfg HTTPConfig) http.Handler {
	inner := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return b.srv }, &sdk.StreamableHTTPOptions{
		MaxRequestBodyBytes: MaxMessageBytes,
		SessionTimeout:      httpSessionIdle,
		Logger:              b.log,
	})
	want := []byte("Bearer " + cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowedHost(r.Host, cfg.Port) {
			http.Error(w, "airlock: forbidden Host", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !allowedOrigin(o, cfg.Port) {
			http.Error(w, "airlock: forbidden Origin", http.StatusForbidden)
			return
		}
		if got := []byte(r.Header.Get("Authorization")); cfg.Token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock mcp"`)
			http.Error(w, "airlock: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
		inner.ServeHTTP(w, r)
	})
}

// allowedHost reports whether hostport is an IP literal or localhost with port.
func allowedHost(hostport, port string) bool {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil || p != port {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	_, err = netip.ParseAddr(host)
	return err == nil
}

// allowedOrigin reports whether origin is http://HOST:PORT with an allowed host.
func allowedOrigin(origin, port string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Path != "" || u.User != nil {
		return false
	}
	return allowedHost(u.Host, port)
}

// IsLoopback reports whether the host of addr (host:port) is a loopback address or localhost.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
