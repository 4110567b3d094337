package mcp

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/loopback"
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

// statelessRevision is the first MCP revision without sessions (SEP-2575: no initialize, a
// server/discover probe, no Mcp-Session-Id, the revision and the client's capabilities in each
// request's _meta). Revisions compare as strings, as the SDK compares them.
const statelessRevision = "2026-07-28"

// metaRevisionKey is the _meta member in which a request of a stateless revision names it.
var metaRevisionKey = []byte(`"` + sdk.MetaKeyProtocolVersion + `"`)

// HTTPPath is the one path at which HTTPHandler serves MCP; every other path is 404.
const HTTPPath = "/mcp"

// HTTPHandler returns the bridge's Streamable HTTP handler, behind four checks, in this order:
//
//   - Host must be an IP literal or "localhost" (in any case: host names are), with the
//     listening port; on a connection to a loopback address, a loopback one. DNS rebinding
//     needs a DNS name that resolves to this host, so such a name is refused (403).
//   - Origin, when a browser sends one, must be http:// with such a host (403 otherwise), so a
//     web page elsewhere cannot drive the server even with a rebinding name.
//   - Authorization must be the Bearer scheme (in any case, as RFC 9110 makes schemes) and
//     the token, compared in constant time (401).
//   - The path must be HTTPPath, the one airlock mcp prints (404).
//
// The SDK's own Host check is off: it compares "localhost" case-sensitively (Host:
// LOCALHOST was 403 where Origin: http://LOCALHOST was not), and allowedHost makes its
// decision (a loopback Host on a loopback connection) in the same place as the others.
// Bodies are bounded by MaxMessageBytes (413).
//
// Behind them are two of the SDK's handlers, one per kind of revision, because one SDK
// handler serves either the session revisions (2025-11-25 and before: initialize, then one
// MCP session per client, named by Mcp-Session-Id) or the stateless one (2026-07-28), and a
// stateful one answers a 2026-07-28 request with -32022. A request goes to the stateless
// handler when its MCP-Protocol-Version header names 2026-07-28 or later (both the go-sdk and
// the TypeScript clients send it with every request of that revision, server/discover
// included), or, without the header, when its body names a revision in _meta, so that the SDK
// answers such a request with the header it lacks rather than with the wrong revision. Every
// other request (initialize, the session's requests, GET streams, DELETE) goes to the
// stateful one. The stateless handler's server/discover lists 2026-07-28 and the session
// revisions, which a client then reaches with initialize. Under 2026-07-28 a client learns of
// a changed tool list on a subscriptions/listen stream (a POST held open, on which the SDK
// sends notifications/tools/list_changed), which ends when the client closes it.
func (b *Bridge) HTTPHandler(cfg HTTPConfig) http.Handler {
	getServer := func(*http.Request) *sdk.Server { return b.srv }
	sessions := sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		MaxRequestBodyBytes:        MaxMessageBytes,
		SessionTimeout:             httpSessionIdle,
		Logger:                     b.log,
		DisableLocalhostProtection: true, // allowedHost's, below
	})
	stateless := sdk.NewStreamableHTTPHandler(getServer, &sdk.StreamableHTTPOptions{
		Stateless:                  true,
		MaxRequestBodyBytes:        MaxMessageBytes,
		Logger:                     b.log,
		DisableLocalhostProtection: true,
		// A call of this revision is its POST: a client that goes away cancels it, and
		// the bridge aborts the adapter's work as it does for notifications/cancelled.
		PropagateRequestCancellation: true,
	})
	want := []byte(cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loopbackOnly := false
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a != nil {
			loopbackOnly = loopback.Addr(a.String())
		}
		if !allowedHost(r.Host, cfg.Port, loopbackOnly) {
			http.Error(w, "airlock: forbidden Host", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !allowedOrigin(o, cfg.Port, loopbackOnly) {
			http.Error(w, "airlock: forbidden Origin", http.StatusForbidden)
			return
		}
		if got, ok := bearerToken(r.Header.Get("Authorization")); !ok || cfg.Token == "" || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock mcp"`)
			http.Error(w, "airlock: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != HTTPPath {
			http.Error(w, "airlock: MCP is served at "+HTTPPath, http.StatusNotFound)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxMessageBytes)
		modern, err := isStateless(r)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("airlock: request body exceeds %d bytes", mbe.Limit), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "airlock: reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if modern {
			stateless.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r)
	})
}

// isStateless reports whether r is a request of a stateless revision (see HTTPHandler). Only a
// POST without MCP-Protocol-Version has its body read (initialize, and every request of a
// client older than 2025-06-18), and then put back for the SDK.
func isStateless(r *http.Request) (bool, error) {
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		return v >= statelessRevision, nil
	}
	if r.Method != http.MethodPost || r.Body == nil {
		return false, nil
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return false, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return namesStatelessRevision(body), nil
}

// namesStatelessRevision reports whether body is one JSON-RPC message whose params._meta names
// a stateless revision, members matched exactly, as the SDK matches them. A body without the
// member's name written out (as every client writes it, rather than with \u or \/ escapes) is
// not decoded: most bodies are not, and some are megabytes.
func namesStatelessRevision(body []byte) bool {
	if !bytes.Contains(body, metaRevisionKey) {
		return false
	}
	var msg, params, meta map[string]json.RawMessage
	var v string
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["params"], &params) != nil ||
		json.Unmarshal(params["_meta"], &meta) != nil || json.Unmarshal(meta[sdk.MetaKeyProtocolVersion], &v) != nil {
		return false // a batch, not JSON, or no revision there: the stateful handler answers it
	}
	return v >= statelessRevision
}

// bearerToken returns the token of an Authorization header of the Bearer scheme: the scheme
// in any case (RFC 9110 §11.1), then one or more spaces (§11.4), then the token.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(token, " "), true
}

// allowedHost reports whether hostport is localhost (in any case) or an IP literal, with
// port; with loopbackOnly (a connection to a loopback address), localhost or a loopback IP.
func allowedHost(hostport, port string, loopbackOnly bool) bool {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil || p != port {
		return false
	}
	if loopbackOnly {
		return loopback.Host(host)
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	_, err = netip.ParseAddr(host)
	return err == nil
}

// allowedOrigin reports whether origin is http://HOST:PORT with an allowed host.
func allowedOrigin(origin, port string, loopbackOnly bool) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Path != "" || u.User != nil {
		return false
	}
	return allowedHost(u.Host, port, loopbackOnly)
}
