package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// Login and session bounds.
const (
	// LoginTokenTTL is how long a minted login token may be exchanged: long enough to paste a
	// URL printed by `airlock room open-ui`, short enough that a token left in a terminal's
	// scrollback is useless soon after.
	LoginTokenTTL = 2 * time.Minute
	// MaxLoginTokens bounds the unexchanged tokens kept; minting more drops the oldest.
	MaxLoginTokens = 16
	// SessionTTL is a session's lifetime from login; the operator logs in again after it.
	SessionTTL = 12 * time.Hour
	// MaxSessions bounds the live sessions; a login beyond it ends the oldest.
	MaxSessions = 16
	// SessionCookie is the session cookie's name.
	SessionCookie = "airlock_session"
	// CSRFHeader carries a session's CSRF token on every state-changing request.
	CSRFHeader = "X-Airlock-CSRF"
)

// secretBytes is the size of every random secret here (login token, session id, CSRF token):
// 256 bits.
const secretBytes = 32

// newSecret returns a random 256-bit value, base64url-encoded.
func newSecret() string {
	var b [secretBytes]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// digest is the SHA-256 of a secret. The maps below are keyed and compared by digest, so a
// lookup's timing depends on the digest, not on how much of a guess matches a live secret,
// and the comparisons are constant-time on top.
type digest [sha256.Size]byte

func digestOf(s string) digest { return sha256.Sum256([]byte(s)) }

type loginToken struct {
	d       digest
	expires time.Time
}

type session struct {
	csrf    string
	expires time.Time
}

// auth holds login tokens and sessions. Times come from time.Now, so tests drive expiry with
// testing/synctest.
type auth struct {
	mu       sync.Mutex
	tokens   []loginToken       // oldest first
	sessions map[digest]session // by digest of the session id
	order    []digest           // session digests, oldest first
}

func newAuth() *auth { return &auth{sessions: make(map[digest]session)} }

// mintToken returns a new single-use login token valid for LoginTokenTTL.
func (a *auth) mintToken() string {
	tok := newSecret()
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneTokens(now)
	if len(a.tokens) >= MaxLoginTokens {
		a.tokens = a.tokens[1:]
	}
	a.tokens = append(a.tokens, loginToken{d: digestOf(tok), expires: now.Add(LoginTokenTTL)})
	return tok
}

func (a *auth) pruneTokens(now time.Time) {
	kept := a.tokens[:0]
	for _, t := range a.tokens {
		if now.Before(t.expires) {
			kept = append(kept, t)
		}
	}
	a.tokens = kept
}

// exchange consumes a login token and returns a new session id, its CSRF token and its
// expiry; ok is false for an unknown, used or expired token. Every live token is compared, in
// constant time.
func (a *auth) exchange(tok string) (id, csrf string, expires time.Time, ok bool) {
	d := digestOf(tok)
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pruneTokens(now)
	found := -1
	for i, t := range a.tokens {
		if subtle.ConstantTimeCompare(t.d[:], d[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", "", time.Time{}, false
	}
	a.tokens = append(a.tokens[:found], a.tokens[found+1:]...)
	a.pruneSessions(now)
	if len(a.order) >= MaxSessions {
		delete(a.sessions, a.order[0])
		a.order = a.order[1:]
	}
	id = newSecret()
	expires = now.Add(SessionTTL)
	sd := digestOf(id)
	csrf = newSecret()
	a.sessions[sd] = session{csrf: csrf, expires: expires}
	a.order = append(a.order, sd)
	return id, csrf, expires, true
}

func (a *auth) pruneSessions(now time.Time) {
	kept := a.order[:0]
	for _, d := range a.order {
		if now.Before(a.sessions[d].expires) {
			kept = append(kept, d)
		} else {
			delete(a.sessions, d)
		}
	}
	a.order = kept
}

// lookup returns the session with this id, if it is live.
func (a *auth) lookup(id string) (session, bool) {
	if id == "" {
		return session{}, false
	}
	d := digestOf(id)
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[d]
	if !ok || !now.Before(s.expires) {
		return session{}, false
	}
	return s, true
}

// checkCSRF reports whether got is the session's CSRF token, in constant time.
func checkCSRF(s session, got string) bool {
	if got == "" {
		return false
	}
	w, g := digestOf(s.csrf), digestOf(got)
	return subtle.ConstantTimeCompare(w[:], g[:]) == 1
}
