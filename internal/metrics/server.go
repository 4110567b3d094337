package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockhq/airlock/internal/connlimit"
	"github.com/airlockhq/airlock/internal/loopback"
)

// CodeInvalidConfig is the code of a refused endpoint configuration (ServerConfig).
const CodeInvalidConfig = "invalid_config"

// Bounds of the endpoint: a scraper sends one small GET and reads one answer.
const (
	ReadHeaderTimeout = 5 * time.Second
	WriteTimeout      = 30 * time.Second
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 8 << 10
	// MaxScrapes bounds the scrapes served at once; one more is answered 503 at once.
	MaxScrapes = 4
	// MaxConns bounds the endpoint's open connections (internal/connlimit), which any local
	// user can open: a few scrapers' keep-alive connections fit.
	MaxConns = 16
	// ScrapeTimeout bounds the gathering of one scrape.
	ScrapeTimeout = 10 * time.Second
)

// Error is a refused configuration: a stable code and a message for humans.
type Error struct {
	Code    string
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// ServerConfig configures the endpoint.
type ServerConfig struct {
	// Addr is the listen address, host:port: a loopback IP or "localhost" unless
	// AllowNonLoopback. Port 0 picks a free port (see Server.Addr).
	Addr string
	// AllowNonLoopback permits a non-loopback Addr (airlockd --metrics-allow-non-loopback).
	AllowNonLoopback bool
}

// Server serves GET /metrics in the Prometheus exposition formats. On a loopback address it
// answers only requests whose Host names a loopback host, so that a web page the operator
// visits cannot read it through a DNS name rebound to 127.0.0.1.
type Server struct {
	cfg     ServerConfig
	handler http.Handler

	mu   sync.Mutex
	addr string
	srv  *http.Server
	wg   sync.WaitGroup // the Serve goroutine
}

// NewServer checks cfg and returns the endpoint of m; it listens once Start is called.
func NewServer(m *Metrics, cfg ServerConfig) (*Server, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, &Error{Code: CodeInvalidConfig, Message: "listen address is not host:port", Err: err}
	}
	loopback := loopback.Host(host)
	if !cfg.AllowNonLoopback && !loopback {
		return nil, &Error{Code: CodeInvalidConfig, Message: "listen address is not loopback (127.0.0.1, ::1 or localhost)"}
	}
	prom := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: MaxScrapes,
		Timeout:             ScrapeTimeout,
	})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom)
	var h http.Handler = mux
	if loopback {
		h = loopbackHost(mux)
	}
	return &Server{cfg: cfg, handler: h}, nil
}

// loopbackHost refuses a request whose Host header is not a loopback host.
func loopbackHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			// No port (the scheme's default): an IPv6 literal keeps its brackets, [::1].
			host = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]")
		}
		if !loopback.Host(host) {
			http.Error(w, "host not allowed", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Start listens and serves in the background until Shutdown.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("metrics: already started")
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("metrics: listen: %w", err)
	}
	s.addr = ln.Addr().String()
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadHeaderTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
	srv := s.srv
	limited := connlimit.New(ln, MaxConns)
	s.wg.Go(func() { _ = srv.Serve(limited) })
	return nil
}

// Addr returns the bound host:port, "" before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Shutdown stops accepting and waits for scrapes in flight until ctx ends, then closes their
// connections. It may be called more than once, and before Start.
func (s *Server) Shutdown(ctx context.Context) error {
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
