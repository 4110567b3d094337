// Package web is the loopback page airlockd serves for its operator: the rooms this host is
// in, their members and capabilities, a form per published action generated from its input
// schema, the requests waiting for approval in the daemon's one queue (local calls, room
// calls, proposals) and the remembered approvals, and a live call log over Server-Sent Events. It
// shows and does only what a Backend offers (airlockd's room service implements it).
//
// # Security
//
// The page is for the operator of this host alone. It listens on loopback unless the
// configuration explicitly allows otherwise. A login is a one-time token (MintLoginToken,
// LoginURL: single use, LoginTokenTTL) exchanged at /login?token=… for a session cookie
// (random 256-bit id, HttpOnly, SameSite=Strict, Path=/, SessionTTL); the exchange redirects
// to /#csrf=… so the token leaves the address bar and the page's script learns the session's
// CSRF token, which it keeps in the origin's localStorage. Every API request needs both the
// cookie and that token (the X-Airlock-CSRF header; the event stream, which an EventSource
// opens without headers, its csrf query parameter): a browser sends a cookie for 127.0.0.1 to
// every port of 127.0.0.1, so a server another local user runs on another port receives the
// cookie whenever the browser visits it; it never receives the token (localStorage and the
// fragment are the origin's, port included). Every request must name this server in its Host
// header (a DNS-rebinding page cannot); every state-changing request must also carry an
// Origin equal to the server's own.
// Responses carry a strict Content-Security-Policy (no inline script or style, nothing from
// elsewhere), X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer and
// X-Frame-Options: DENY. The page's script renders everything the Backend returns as text,
// never as markup. Request bodies are bounded by MaxRequestBytes (413 beyond it).
//
// The cookie is not marked Secure: the page is served over plain HTTP on loopback, where
// nothing on the path can read it.
//
// # HTTP API
//
// The page's script uses these; every answer is JSON, an error is {"error":{"code","message"}}.
// Each needs the session cookie and its CSRF token.
//
//	GET  /api/session           {"csrf": token}: whether the login is live
//	GET  /api/rooms             [Room]
//	GET  /api/rooms/{id}        RoomDetail, each action with its generated "form" (see FormOf)
//	POST /api/observe           {"room","provider","capability"} → {"result"}
//	POST /api/invoke            {"room","provider","capability","action","args"} → {"result"}
//	GET  /api/approvals         [Approval]
//	POST /api/decide            {"id","approve","remember","pattern","anyArgs"} → {}
//	GET  /api/remembered        [Memory]
//	POST /api/forget            {"id"} → {}
//	GET  /api/events            text/event-stream of Event (event: call|approval), heartbeats
package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/connlimit"
	"github.com/airlockhq/airlock/internal/loopback"
)

// Server bounds and timeouts.
const (
	// MaxRequestBytes bounds a request body: an invoke's args (≤ 8 KiB at the room edge) and
	// its envelope fit with room to spare.
	MaxRequestBytes = 16 << 10
	// ReadHeaderTimeout and ReadTimeout bound how long a client may take to send a request.
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 16 << 10
	// MaxConns bounds the page's open connections (internal/connlimit): a few tabs of one
	// operator, each with its event stream and the browser's handful of parallel requests,
	// fit many times over.
	MaxConns = 64
	// RequestTimeout bounds a backend call of any request but invoke.
	RequestTimeout = 15 * time.Second
	// InvokeRequestTimeout bounds an invoke: a room call's deadline plus a per-call approval's
	// wait (60 s) fit inside it.
	InvokeRequestTimeout = 90 * time.Second
	// writeSlack is added to a request's timeout for its response's write deadline.
	writeSlack = 5 * time.Second
	// MaxStreams bounds the event streams open at once (a few tabs of one operator).
	MaxStreams = 8
	// HeartbeatInterval is how often an idle event stream gets a comment line, so that the
	// browser and the server both notice a dead connection.
	HeartbeatInterval = 15 * time.Second
	// StreamWriteTimeout bounds one write to an event stream; a reader that stalls longer is
	// dropped (the browser reconnects).
	StreamWriteTimeout = 10 * time.Second
)

// CodeInvalidConfig is New's error code for a configuration it refuses.
const CodeInvalidConfig = "invalid_config"

//go:embed assets
var assets embed.FS

// Config configures a Server.
type Config struct {
	// Addr is the listen address, host:port; a loopback IP or "localhost" unless
	// AllowNonLoopback. Port 0 picks a free port (see Server.Addr).
	Addr string
	// AllowNonLoopback permits a non-loopback Addr. The page then still answers only requests
	// whose Host header names Addr (or one of Hosts).
	AllowNonLoopback bool
	// Hosts are further host:port values the Host header may carry (a name the operator uses).
	Hosts []string
	// Backend is what the page shows and does.
	Backend Backend
	// History, if set, backs the page's history view (GET /api/history): JournalHistory, the
	// audit journal. Without it the view answers history_unavailable.
	History History
	// Logf, if set, is told of uncoded backend failures (which the page shows only as
	// "internal"), by operation and Go type, never by text.
	Logf func(format string, args ...any)
}

// Server serves the page. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	backend Backend
	auth    *auth
	handler http.Handler
	stop    chan struct{} // closed by Shutdown: event streams end
	stopped sync.Once
	streams chan struct{} // a semaphore of MaxStreams

	mu    sync.Mutex // guards the fields below
	addr  string     // the bound host:port; "" before Start
	hosts []string   // Host header values accepted
	srv   *http.Server
	wg    sync.WaitGroup // the Serve goroutine
}

// New returns a Server for cfg; it listens once Start is called.
func New(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, &Error{Code: CodeInvalidConfig, Message: "no backend"}
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, &Error{Code: CodeInvalidConfig, Message: "listen address is not host:port", Err: err}
	}
	if !cfg.AllowNonLoopback && !loopback.Host(host) {
		return nil, &Error{Code: CodeInvalidConfig, Message: "listen address is not loopback (127.0.0.1, ::1 or localhost)"}
	}
	s := &Server{
		cfg:     cfg,
		backend: cfg.Backend,
		auth:    newAuth(),
		stop:    make(chan struct{}),
		streams: make(chan struct{}, MaxStreams),
	}
	s.handler = s.routes()
	return s, nil
}

// Start listens on the configured address and serves in the background until Shutdown.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return &Error{Code: CodeInvalidConfig, Message: "already started"}
	}
	select {
	case <-s.stop:
		return &Error{Code: CodeInvalidConfig, Message: "already shut down"}
	default:
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("web: listen: %w", err)
	}
	s.bindLocked(ln.Addr().String())
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	srv := s.srv
	limited := connlimit.New(ln, MaxConns)
	s.wg.Go(func() { _ = srv.Serve(limited) })
	return nil
}

// bindLocked records the bound address and the Host values it accepts.
func (s *Server) bindLocked(addr string) {
	s.addr = addr
	s.hosts = append([]string{addr}, s.cfg.Hosts...)
	if host, port, err := net.SplitHostPort(addr); err == nil && loopback.Host(host) {
		s.hosts = append(s.hosts, net.JoinHostPort("localhost", port))
	}
}

// Addr returns the bound host:port, "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Shutdown ends the event streams, stops accepting, and waits for requests in flight until
// ctx ends (then it closes their connections). It may be called more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopped.Do(func() { close(s.stop) })
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		srv.Close()
	}
	s.wg.Wait()
	return err
}

// Handler returns the page's http.Handler, for a caller that serves it itself; the Host check
// then accepts the hosts of Config.Addr and Config.Hosts.
func (s *Server) Handler() http.Handler {
	s.mu.Lock()
	if s.addr == "" {
		s.bindLocked(s.cfg.Addr)
	}
	s.mu.Unlock()
	return s.handler
}

// MintLoginToken returns a new one-time login token, valid for LoginTokenTTL.
func (s *Server) MintLoginToken() string { return s.auth.mintToken() }

// LoginURL mints a login token and returns the URL that exchanges it, for the operator to
// open. It fails before Start.
func (s *Server) LoginURL() (string, error) {
	addr := s.Addr()
	if addr == "" {
		return "", &Error{Code: CodeInvalidConfig, Message: "not started"}
	}
	u := url.URL{Scheme: "http", Host: addr, Path: "/login", RawQuery: "token=" + url.QueryEscape(s.MintLoginToken())}
	return u.String(), nil
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// contentSecurityPolicy allows the page's own script, style and connections, and nothing else.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// routes builds the handler: security headers and the Host and Origin checks on every
// request, then the routes.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.serveIndex)
	mux.HandleFunc("GET /app.js", s.serveAsset("assets/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /app.css", s.serveAsset("assets/app.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /login", s.serveLogin)
	mux.HandleFunc("GET /api/session", s.authed(s.apiSession))
	mux.HandleFunc("GET /api/rooms", s.authed(s.apiRooms))
	mux.HandleFunc("GET /api/rooms/{id}", s.authed(s.apiRoom))
	mux.HandleFunc("POST /api/observe", s.authed(s.apiObserve))
	mux.HandleFunc("POST /api/invoke", s.authed(s.apiInvoke))
	mux.HandleFunc("GET /api/approvals", s.authed(s.apiApprovals))
	mux.HandleFunc("POST /api/decide", s.authed(s.apiDecide))
	mux.HandleFunc("GET /api/remembered", s.authed(s.apiRemembered))
	mux.HandleFunc("POST /api/forget", s.authed(s.apiForget))
	mux.HandleFunc("GET /api/events", s.authed(s.apiEvents))
	mux.HandleFunc("GET /api/history", s.authed(s.apiHistory))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if !s.hostAllowed(r.Host) {
			writeError(w, http.StatusForbidden, CodeForbidden, "unexpected Host header")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if r.Header.Get("Origin") != "http://"+r.Host {
				writeError(w, http.StatusForbidden, CodeForbidden, "missing or foreign Origin")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) hostAllowed(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// session returns the live session whose id the request's cookie holds.
func (s *Server) session(r *http.Request) (session, bool) {
	var id string
	if c, err := r.Cookie(SessionCookie); err == nil {
		id = c.Value
	}
	return s.auth.lookup(id)
}

// authed wraps an API handler: it needs a live session and the session's CSRF token, on
// every request, reads included. The cookie alone is not a login: the browser also sends it
// to every other port of this host (TestCookieAloneIsNoLogin).
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(r)
		if !ok {
			writeError(w, http.StatusUnauthorized, CodeUnauthenticated, "not logged in")
			return
		}
		if !checkCSRF(sess, csrfOf(r)) {
			writeError(w, http.StatusForbidden, CodeForbidden, "missing or wrong CSRF token")
			return
		}
		h(w, r, sess)
	}
}

// csrfOf returns the CSRF token a request carries: its X-Airlock-CSRF header, or, on the
// event stream, which an EventSource opens without headers, its csrf query parameter.
func csrfOf(r *http.Request) string {
	if tok := r.Header.Get(CSRFHeader); tok != "" {
		return tok
	}
	if r.Method == http.MethodGet && r.URL.Path == "/api/events" {
		return r.URL.Query().Get("csrf")
	}
	return ""
}

// serveIndex serves the page itself, which holds nothing of the host (its script asks the
// API), to a browser with a live session cookie; without one it says how to log in.
func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.session(r); !ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, "Not logged in. Open the login link printed by `airlock room open-ui`; each link works once.")
		return
	}
	s.serveAsset("assets/index.html", "text/html; charset=utf-8")(w, r)
}

func (s *Server) serveAsset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := assets.ReadFile(name)
		if err != nil {
			writeError(w, http.StatusNotFound, CodeNotFound, "no such file")
			return
		}
		w.Header().Set("Content-Type", contentType)
		w.Write(b)
	}
}

// serveLogin exchanges a login token for a session cookie and redirects to the page, dropping
// the token from the address bar (and, with Referrer-Policy, from any referrer). The
// redirect's fragment gives the page's script the session's CSRF token: a fragment is never
// sent to a server, and the script keeps the token in the origin's own storage.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	id, csrf, expires, ok := s.auth.exchange(r.URL.Query().Get("token"))
	if !ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, "This login link is unknown, used or expired. Run `airlock room open-ui` for a new one.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    id,
		Path:     "/",
		Expires:  expires,
		MaxAge:   int(SessionTTL / time.Second),
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/#csrf="+csrf, http.StatusSeeOther)
}

// errorStatus maps an error code the page shows to the HTTP status it answers with.
func errorStatus(code string) int {
	switch code {
	case CodeInternal:
		return http.StatusInternalServerError
	case CodeTimeout:
		return http.StatusGatewayTimeout
	case CodeBadRequest:
		return http.StatusBadRequest
	}
	return http.StatusUnprocessableEntity
}

// backendError answers with a Backend error's code and message.
func (s *Server) backendError(w http.ResponseWriter, op string, err error) {
	code, msg := publicError(err)
	if code == CodeInternal {
		// Only the error's type: its text is the backend's and may quote what no log may
		// hold; the backend logs its own failures.
		s.logf("web: %s: uncoded backend error %T", op, err)
	}
	writeError(w, errorStatus(code), code, msg)
}

// isBodyTooLarge reports whether err comes from a body over MaxRequestBytes.
func isBodyTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}
