package model

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/version"
)

// Default limits. Each bounds memory that a provider's response can make the client hold.
const (
	// DefaultMaxResponseBytes bounds a whole response body, streamed or not.
	DefaultMaxResponseBytes = 8 << 20
	// DefaultMaxLineBytes bounds one SSE line and one event's joined data. A chunk holds one
	// delta, so this is far above any real chunk.
	DefaultMaxLineBytes = 1 << 20
	// DefaultMaxToolCalls bounds the tool calls of one response.
	DefaultMaxToolCalls = 32
	// DefaultMaxArgumentBytes bounds the arguments of one tool call.
	DefaultMaxArgumentBytes = 256 << 10
)

// Timeouts of the default HTTP client. There is no overall timeout: the caller's context
// governs a call, since a long generation is legitimate.
const (
	// DefaultDialTimeout bounds connecting to the provider.
	DefaultDialTimeout = 10 * time.Second
	// DefaultTLSHandshakeTimeout bounds the TLS handshake.
	DefaultTLSHandshakeTimeout = 10 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for response headers. It is long because
	// local servers (llama.cpp, Ollama) send headers only after processing the whole
	// prompt, and without streaming only after the whole generation, which takes minutes
	// on modest hardware.
	DefaultResponseHeaderTimeout = 5 * time.Minute
	// defaultIdleConnTimeout closes pooled connections the provider would drop anyway.
	defaultIdleConnTimeout = 90 * time.Second
	// DefaultBodyIdleTimeout bounds the silence of a response body once its headers came. A
	// provider that stops sending mid-answer (a wedged server, a connection whose peer
	// vanished without a reset) would otherwise hold the turn, and one of the host's turn
	// slots, until an operator aborted it. It is as long as DefaultResponseHeaderTimeout,
	// for the same slow local servers: one may send a stream's headers first and then
	// process the whole prompt before its first token.
	DefaultBodyIdleTimeout = 5 * time.Minute
)

// maxErrorBodyBytes bounds the body read from an error response: only its message is kept.
const maxErrorBodyBytes = 64 << 10

// Option configures a Client.
type Option func(*options)

type options struct {
	httpClient          *http.Client
	lim                 limits
	maxCompletionTokens bool
	bodyIdleTimeout     time.Duration
}

// WithHTTPClient makes the client send requests with hc instead of its own default client.
// The caller then owns hc's timeouts, proxy and redirect policy.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) {
		if hc != nil {
			o.httpClient = hc
		}
	}
}

// WithMaxResponseBytes sets the bound on a response body; n <= 0 keeps the default.
func WithMaxResponseBytes(n int64) Option {
	return func(o *options) {
		if n > 0 {
			o.lim.maxResponseBytes = n
		}
	}
}

// WithMaxLineBytes sets the bound on one SSE line and event; n <= 0 keeps the default.
func WithMaxLineBytes(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.lim.maxLineBytes = n
		}
	}
}

// WithMaxToolCalls sets the bound on tool calls per response; n <= 0 keeps the default.
func WithMaxToolCalls(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.lim.maxToolCalls = n
		}
	}
}

// WithMaxArgumentBytes sets the bound on one tool call's arguments; n <= 0 keeps the default.
func WithMaxArgumentBytes(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.lim.maxArgumentBytes = n
		}
	}
}

// WithBodyIdleTimeout sets how long a response body may send nothing before the call fails
// model_timeout; d <= 0 keeps DefaultBodyIdleTimeout. It applies with WithHTTPClient too.
func WithBodyIdleTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.bodyIdleTimeout = d
		}
	}
}

// WithMaxCompletionTokens sends Request.MaxTokens as "max_completion_tokens" instead of
// "max_tokens". OpenAI's reasoning models refuse "max_tokens", while Ollama and older
// llama.cpp builds silently ignore "max_completion_tokens"; so "max_tokens" is the default
// and this option is for OpenAI itself.
func WithMaxCompletionTokens(on bool) Option {
	return func(o *options) { o.maxCompletionTokens = on }
}

// secret holds the key behind a pointer, so that printing a Client with fmt shows an address
// rather than the key (fmt prints unexported fields by reflection, bypassing any method).
type secret struct{ key string }

// Client calls one provider. It is safe for concurrent use.
type Client struct {
	name     string
	endpoint string
	auth     *secret
	hc       *http.Client
	opts     options
}

// NewClient returns a client for p. Requests go to p.BaseURL + "/chat/completions".
func NewClient(p Provider, opts ...Option) *Client {
	o := options{lim: limits{
		maxResponseBytes: DefaultMaxResponseBytes,
		maxLineBytes:     DefaultMaxLineBytes,
		maxToolCalls:     DefaultMaxToolCalls,
		maxArgumentBytes: DefaultMaxArgumentBytes,
	}, bodyIdleTimeout: DefaultBodyIdleTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	hc := o.httpClient
	if hc == nil {
		hc = newHTTPClient()
	}
	return &Client{
		name:     p.Name,
		endpoint: strings.TrimSuffix(p.BaseURL, "/") + "/chat/completions",
		auth:     &secret{key: p.Key},
		hc:       hc,
		opts:     o,
	}
}

// newHTTPClient returns a client with bounded connection setup and no overall timeout. It
// does not follow redirects: a POST would be replayed elsewhere, and a cross-host redirect
// would drop the Authorization header, turning a configuration error into a confusing 401.
func newHTTPClient() *http.Client {
	dialer := &net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: 30 * time.Second}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			TLSHandshakeTimeout:   DefaultTLSHandshakeTimeout,
			ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
			IdleConnTimeout:       defaultIdleConnTimeout,
			MaxIdleConnsPerHost:   4,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Name returns the provider's name.
func (c *Client) Name() string { return c.name }

// CloseIdleConnections closes the client's idle pooled connections, ending their goroutines.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Complete sends req and returns the finished response. Every error is an *Error.
//
// onDelta, which may be nil, is called on the calling goroutine with each piece of text and
// each tool call start, in order, as they arrive; without streaming, all at once after the
// body is decoded. With streaming, deltas may have been delivered before an error is
// returned: the caller must treat them as void then.
//
// A canceled ctx returns model_canceled and a passed deadline model_timeout, whichever
// stage the call is in; so does a response body that sends nothing for the body idle timeout
// (WithBodyIdleTimeout), model_timeout. The response body is closed before Complete returns.
func (c *Client) Complete(ctx context.Context, req Request, onDelta func(Delta)) (Response, error) {
	s := scrubber{key: c.auth.key}
	resp, err := c.complete(ctx, req, s, onDelta)
	if err != nil {
		if ctx.Err() != nil {
			return Response{}, c.named(s, s.contextError(ctx.Err()))
		}
		var e *Error
		if !errors.As(err, &e) {
			e = s.transportError(err, c.opts.lim.maxResponseBytes)
		}
		return Response{}, c.named(s, e)
	}
	return resp, nil
}

// named puts the provider's name in front of e's message.
func (c *Client) named(s scrubber, e *Error) *Error {
	e.Message = s.text("provider " + strconv.Quote(c.name) + ": " + e.Message)
	return e
}

func (c *Client) complete(ctx context.Context, req Request, s scrubber, onDelta func(Delta)) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, err
	}
	// The body's idle timer cancels the request through its own context, so that a read
	// blocked on a silent connection returns; the caller's ctx is left alone, and its own
	// end still decides in Complete.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	resp, err := c.exchange(ctx, req, s, onDelta, cancel)
	if err != nil && errors.Is(context.Cause(ctx), errBodyIdle) {
		return Response{}, s.newError(CodeTimeout, true, 0,
			"sent nothing for "+c.opts.bodyIdleTimeout.String()+" in the middle of its answer", nil)
	}
	return resp, err
}

// errBodyIdle is the cause a response body's idle timer cancels the request with.
var errBodyIdle = errors.New("the response body was idle too long")

func (c *Client) exchange(ctx context.Context, req Request, s scrubber, onDelta func(Delta), cancel context.CancelCauseFunc) (Response, error) {
	body, err := encodeRequest(req, c.opts.maxCompletionTokens)
	if err != nil {
		return Response{}, s.newError(CodeRequestRejected, false, 0, "invalid request", err)
	}
	if !validHeaderValue(c.auth.key) {
		return Response{}, s.newError(CodeRequestRejected, false, 0,
			"the API key contains characters an HTTP header cannot carry (a trailing newline?)", nil)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		// The parse error repeats the URL; it is left out, as the URL is configuration the
		// operator can read, and it might hold user info.
		return Response{}, s.newError(CodeRequestRejected, false, 0, "invalid provider base URL", nil)
	}
	hr.Header.Set("Content-Type", "application/json")
	if req.Stream {
		hr.Header.Set("Accept", "text/event-stream")
	} else {
		hr.Header.Set("Accept", "application/json")
	}
	hr.Header.Set("User-Agent", "airlock/"+version.Version)
	if c.auth.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.auth.key)
	}
	res, err := c.hc.Do(hr)
	if err != nil {
		return Response{}, err
	}
	defer res.Body.Close()
	idle := time.AfterFunc(c.opts.bodyIdleTimeout, func() { cancel(errBodyIdle) })
	defer idle.Stop()
	res.Body = &idleReader{ReadCloser: res.Body, timer: idle, d: c.opts.bodyIdleTimeout}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return Response{}, s.errorResponse(res)
	}
	if isWebPage(res.Header.Get("Content-Type")) {
		// A web page (a server's UI, a proxy's login) where the API should answer: the base
		// URL is not the API's, which no retry mends.
		return Response{}, s.newError(CodeNotFound, false, res.StatusCode, "answered a web page (text/html), not the Chat Completions API: check that the provider's base URL is the API's (often ending in /v1)", nil)
	}
	r := &limitedReader{r: res.Body, n: c.opts.lim.maxResponseBytes}
	if isEventStream(res.Header.Get("Content-Type"), req.Stream) {
		return decodeStream(r, c.opts.lim, s, onDelta)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Response{}, err
	}
	out, err := decodeCompletion(data, c.opts.lim, s)
	if err != nil {
		return Response{}, err
	}
	emitResponse(out, onDelta)
	return out, nil
}

// isEventStream chooses the decoder by the response's media type, falling back on what was
// asked: some servers answer a streaming request with a whole JSON body, and a few label
// their streams oddly.
func isEventStream(contentType string, asked bool) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return asked
	case mt == "text/event-stream":
		return true
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return false
	}
	return asked
}

// isWebPage reports whether a 2xx answer is an HTML page.
func isWebPage(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "text/html" || mt == "application/xhtml+xml")
}

// errorResponse maps a non-2xx response, reading a bounded part of its body for the
// provider's message.
func (s scrubber) errorResponse(res *http.Response) *Error {
	data, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBodyBytes))
	retryAfter := parseRetryAfter(res.Header.Get("Retry-After"), time.Now())
	return s.statusError(res.StatusCode, retryAfter, errorBodyText(data), false)
}

// errorBodyText returns the provider's error message from an error body. A JSON body
// yields only its decoded error message, never other members (where the key could hide
// behind JSON escapes); a non-JSON body (a proxy's HTML or text page) is returned whole,
// to be cleaned and truncated.
func errorBodyText(data []byte) string {
	if !json.Valid(data) {
		return string(data)
	}
	var w struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(data, &w) != nil {
		return ""
	}
	if t := providerErrorText(w.Error); t != "" {
		return t
	}
	var t string
	if json.Unmarshal(w.Message, &t) == nil {
		return t
	}
	return ""
}

// contextError maps a context's error.
func (s scrubber) contextError(err error) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return s.newError(CodeTimeout, true, 0, "the call's deadline passed", err)
	}
	return s.newError(CodeCanceled, false, 0, "the call was canceled", err)
}

// transportError maps a failure to send the request or read the response.
func (s scrubber) transportError(err error, maxResponseBytes int64) *Error {
	var ne net.Error
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var he x509.HostnameError
	var cie x509.CertificateInvalidError
	switch {
	case errors.Is(err, errTooLarge):
		return s.invalid("the response is longer than "+strconv.FormatInt(maxResponseBytes, 10)+" bytes", err)
	case errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &he) || errors.As(err, &cie):
		return s.newError(CodeUnavailable, false, 0, "its TLS certificate was refused", err)
	case errors.As(err, &ne) && ne.Timeout():
		return s.newError(CodeTimeout, true, 0, "did not answer in time", err)
	}
	return s.newError(CodeUnavailable, true, 0, "could not be reached", err)
}

// limitedReader fails with errTooLarge once more than n bytes were read, unlike
// io.LimitReader, whose silent EOF would turn an oversized body into a truncated one.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	if most := l.n + 1; most > 0 && int64(len(p)) > most { // most overflows only for a huge n
		p = p[:most]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errTooLarge
	}
	return n, err
}

// idleReader restarts its timer after every read that returned bytes, so that the timer fires
// only once the body has sent nothing for d.
type idleReader struct {
	io.ReadCloser
	timer *time.Timer
	d     time.Duration
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

// validHeaderValue reports whether v can be sent in an HTTP header: no control characters
// other than tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return false
		}
	}
	return true
}
