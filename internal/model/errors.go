package model

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error codes. Each is stable: the daemon branches on it and reports it to clients.
const (
	// CodeUnavailable: the provider could not be reached (connection refused, DNS, TLS, a
	// connection lost mid-response, a stream that ended before [DONE]), answered 5xx, or
	// reported an error without an HTTP-like code inside a 200 response or stream.
	// Retryable, except certificate failures.
	CodeUnavailable = "model_unavailable"
	// CodeAuthFailed: the provider answered 401 or 403.
	CodeAuthFailed = "model_auth_failed"
	// CodeRateLimited: the provider answered 429. Retryable; Error.RetryAfter holds its
	// Retry-After header when present.
	CodeRateLimited = "model_rate_limited"
	// CodeNotFound: the provider answered 404 (unknown model, or a BASE_URL without the
	// Chat Completions API), or a web page (text/html) where the API should answer.
	CodeNotFound = "model_not_found"
	// CodeRequestRejected: the provider answered another 4xx (or a 3xx, which is not
	// followed), or the request could not be sent as given (Status 0).
	CodeRequestRejected = "model_request_rejected"
	// CodeResponseInvalid: the response broke the protocol: bad JSON or SSE, no choices,
	// tool call arguments that are not a JSON object, or a size limit exceeded.
	CodeResponseInvalid = "model_response_invalid"
	// CodeTimeout: the context's deadline passed, or a transport timeout (dial, TLS,
	// response header) fired. Retryable: a later call with a fresh deadline may succeed.
	CodeTimeout = "model_timeout"
	// CodeCanceled: the context was canceled.
	CodeCanceled = "model_canceled"
)

// maxProviderMessage bounds the provider's error text kept in an Error.
const maxProviderMessage = 512

// Error is every error Complete returns. Message is safe to show and to log: the provider's
// API key is replaced by "[redacted]" wherever it occurs, and Err is replaced by a redacted
// copy (which unwraps to nothing) if its text contained the key.
//
// Errors compare by code: errors.Is(err, &Error{Code: CodeRateLimited}) holds for any
// rate-limit error, however wrapped.
type Error struct {
	Code    string
	Message string
	// Retryable reports whether the same request may succeed later. The client never
	// retries by itself: deltas already delivered make that the caller's decision.
	Retryable bool
	// Status is the provider's HTTP status; 0 if none was received.
	Status int
	// RetryAfter is the delay a retryable error's Retry-After header asked for (429 or
	// 5xx), capped at a day; 0 if absent or unparsable.
	RetryAfter time.Duration
	// Err is the underlying cause, for errors.Is and errors.As (context errors, net errors).
	Err error
}

// Error returns the code and the message.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the code of the *Error in err's chain, or "" if there is none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// redactedError stands in for a cause whose text contained the key.
type redactedError struct{ msg string }

func (e *redactedError) Error() string { return e.msg }

// scrubber removes one secret from text. Its zero value removes nothing.
type scrubber struct{ key string }

func (s scrubber) text(t string) string {
	if s.key == "" {
		return t
	}
	return strings.ReplaceAll(t, s.key, redacted)
}

// newError builds an Error whose message and cause are scrubbed of the key. The cause's text
// is appended to msg.
func (s scrubber) newError(code string, retryable bool, status int, msg string, cause error) *Error {
	if cause != nil {
		ct := cause.Error()
		if st := s.text(ct); st != ct {
			cause = &redactedError{msg: st}
			ct = st
		}
		msg += ": " + ct
	}
	return &Error{Code: code, Message: s.text(msg), Retryable: retryable, Status: status, Err: cause}
}

// invalid is the common model_response_invalid error.
func (s scrubber) invalid(msg string, cause error) *Error {
	return s.newError(CodeResponseInvalid, false, 0, msg, cause)
}

// errTooLarge is the cause of a size-limit error.
var errTooLarge = errors.New("size limit exceeded")

// statusError maps a non-2xx response to an Error. providerMsg is the provider's own error
// text (already extracted from the body), scrubbed and bounded here.
// With inBody, the status came from an error inside a 200 response, and Error.Status stays 0.
func (s scrubber) statusError(status int, retryAfter time.Duration, providerMsg string, inBody bool) *Error {
	code, retryable := CodeRequestRejected, false
	switch {
	case status == 401 || status == 403:
		code = CodeAuthFailed
	case status == 404:
		code = CodeNotFound
	case status == 429:
		code, retryable = CodeRateLimited, true
	case status >= 500:
		code, retryable = CodeUnavailable, true
	}
	msg := "answered HTTP " + strconv.Itoa(status)
	if inBody {
		msg = "reported an error with code " + strconv.Itoa(status)
	}
	if status >= 300 && status < 400 {
		msg += " (redirects are not followed; configure the final BASE_URL)"
	}
	if t := cleanProviderText(s.text(providerMsg)); t != "" {
		msg += ": " + t
	}
	e := s.newError(code, retryable, status, msg, nil)
	if inBody {
		e.Status = 0
	}
	if retryable {
		e.RetryAfter = retryAfter
	}
	return e
}

// cleanProviderText makes provider text one printable line of at most maxProviderMessage
// bytes. The key must be scrubbed before this truncation, or a cut could leave part of it.
func cleanProviderText(t string) string {
	t = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, t)
	t = strings.TrimSpace(t)
	if len(t) <= maxProviderMessage {
		return t
	}
	cut := maxProviderMessage
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut] + "…"
}

// maxRetryAfter bounds a Retry-After value so that a hostile header cannot park a caller
// for days; a day is longer than any real provider asks.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads delay-seconds or an HTTP date; 0 when absent or unparsable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}
