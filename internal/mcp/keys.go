package mcp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/audit"
)

// What a retried tools/call is, and how it keeps its key.
//
// MCP has no idempotency key, and a request id may not be reused within a session, so a retry
// is a new request: the same tool with the same arguments, sent again by a client (or the agent
// behind it) that never learnt the first one's outcome, because it cancelled it, timed it out,
// lost the connection, or was told the outcome is indeterminate. The bridge therefore keys a
// call by its fingerprint: the MCP session, the tool and the canonical form of its arguments,
// kept as their SHA-256 only (a call's arguments may be megabytes, and a key lives an hour).
//
//   - A call whose outcome is definite (a result, or an error the daemon marks as not
//     indeterminate) retires its key: the next identical call is a new call with a new key,
//     as a person who writes a file twice on purpose expects.
//   - A call that ends without a definite outcome (cancelled, or indeterminate) leaves its key
//     open for keyTTL: the next identical call reuses it, so the adapter answers it from its
//     idempotency memory (airlock-fs replays a finished write's outcome, joins a running one,
//     and runs again only what failed retryably) and the write happens at most once.
//   - Identical calls in flight together share one key; the daemon runs the first and refuses
//     the others while it runs (adapter_request_invalid, retryable), and their retry is
//     answered from the adapter's memory.
//   - Reads (fs.list, fs.stat, fs.read, fs.search) without a client-named key are not keyed:
//     each call gets a fresh key, since repeating a read repeats nothing, and identical reads
//     in flight together must both be answered.
//
// A client that knows better names the call itself with _meta["io.airlock/idempotencyKey"]:
// then the key derives from the session generation, the tool and that name alone, and holds
// across MCP sessions and bridge processes (for capability actions, within one bridge process).
//
// Capability actions have no idempotency in the daemon or the adapter, so for them the table
// is also the memory airlock-fs is for fs tools: an action runs once per key (callAction), and
// a client-named action's outcome stays in its entry for keyTTL after it, so that the same
// call is answered from it and the same name with other arguments is idempotency_conflict,
// as airlock-fs answers a named write. Like airlock-fs, it forgets a retryable failure at
// once: the same call then runs again, as a retryable failure invites. The memory is this
// process's: a bridge that restarts has forgotten it. It is bounded in entries (maxKeys) and
// in the bytes of the outcomes it holds for a retry (maxResultBytes); an outcome forgotten
// at either bound leaves its retry to run the action again.
//
// Keys are toolCallIds of invokeTool: "mcp-" and 43 characters of base64url SHA-256.
const (
	// keyTTL bounds how long an open key waits for a retry, and how long a client-named
	// capability action's outcome is remembered after it: the default idempotency memory of
	// airlock-fs (idempotencyTtlMs) is one hour.
	keyTTL = time.Hour
	// maxKeys bounds the table. Past it, the open keys and remembered outcomes closest to
	// expiry are forgotten first (a later retry of one of them then runs as a new call); keys
	// in use are never dropped.
	maxKeys = 4096
	// maxResultBytes bounds the bytes of the outcomes the table holds for a retry (a named
	// action's kept outcome, or an unnamed one's whose client gave up), which maxKeys does not:
	// an outcome may be megabytes. Past it, the held outcomes expired or finished first are
	// forgotten, as entries past maxKeys are; an outcome larger than the whole bound is not
	// held at all. It is larger than any one result a message carries (MaxMessageBytes), so
	// the latest outcome is always held.
	maxResultBytes = 16 << 20
	// actionTimeout bounds one capability action on the bridge's detached context.
	actionTimeout = 2 * time.Minute
)

// keyEntry is one key: the calls using it now, whether it is open for a retry, and for a
// capability action its single run.
type keyEntry struct {
	key     string
	users   int
	open    bool
	expires time.Time

	// For a capability action (acquireAction): argsSum, the SHA-256 of the canonical
	// arguments of the call that made the entry (a digest, since the arguments may be
	// megabytes); named, when the client named the call, which makes the entry keep its run's
	// outcome (see finishRun); kept, once it does, until expires.
	argsSum [sha256.Size]byte
	named   bool
	kept    bool

	running bool
	done    chan struct{} // closed when the run's res is set
	res     *sdk.CallToolResult
	// size is res's bytes (resultBytes) and finished orders the ends of runs; held reports
	// that size counts in keyTable.heldBytes: res is set, the entry is in the table, and no
	// call uses it (holdLocked).
	size     int64
	finished uint64
	held     bool
}

// keyTable maps call fingerprints to keys. Safe for concurrent use.
type keyTable struct {
	nonce string // per process: two bridges never mint the same key for different calls
	now   func() time.Time

	maxHeld int64 // maxResultBytes; a test lowers it

	// mu guards the fields below.
	mu        sync.Mutex
	seq       uint64
	runs      uint64
	heldBytes int64 // sum of the held entries' size, at most maxHeld
	byFP      map[string]*keyEntry
}

func newKeyTable() *keyTable {
	return &keyTable{nonce: rand.Text(), now: time.Now, maxHeld: maxResultBytes, byFP: map[string]*keyEntry{}}
}

// callFingerprint is the identity of a call. explicit, when set, replaces the session and the
// arguments: the client named the call. An unnamed call's fingerprint is a digest, since it
// stays in the table while its key is open and the arguments may be megabytes; a named one's
// is bounded by the name (maxExplicitKeyLen) and its key derives from it as it is.
func callFingerprint(sessionID, tool string, args json.RawMessage, explicit string) string {
	if explicit != "" {
		return "explicit\x00" + tool + "\x00" + explicit
	}
	h := sha256.New()
	h.Write([]byte(sessionID + "\x00" + tool + "\x00"))
	h.Write(canonicalJSON(args))
	return "call\x00" + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// canonicalJSON is raw's canonical form (audit.Canonical: members sorted, numbers as written),
// so that two spellings of the same arguments are one call. Input that has none (not JSON, a
// duplicate key, which objectArguments refuses) is returned as it is.
func canonicalJSON(raw json.RawMessage) []byte {
	if c, err := audit.Canonical(raw); err == nil {
		return c
	}
	return raw
}

// fresh returns a new key that no call shares.
func (t *keyTable) fresh() string {
	t.mu.Lock()
	t.seq++
	seq := t.seq
	t.mu.Unlock()
	sum := sha256.Sum256([]byte(t.nonce + "\x00" + strconv.FormatUint(seq, 10) + "\x00fresh"))
	return "mcp-" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// isExplicit reports whether fp is a client-named call's (callFingerprint).
func isExplicit(fp string) bool { return strings.HasPrefix(fp, "explicit\x00") }

// acquire returns the key of fp: the open or in-use one, or a new one.
func (t *keyTable) acquire(fp string) *keyEntry {
	e, _ := t.get(fp, [sha256.Size]byte{}, false)
	return e
}

// acquireAction is acquire for a capability action whose canonical arguments are args. It
// reports conflict, and acquires nothing, when the live entry of fp, a client-named call's,
// was made by a call with other arguments.
func (t *keyTable) acquireAction(fp string, args []byte) (e *keyEntry, conflict bool) {
	return t.get(fp, sha256.Sum256(args), true)
}

func (t *keyTable) get(fp string, argsSum [sha256.Size]byte, action bool) (e *keyEntry, conflict bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if e := t.byFP[fp]; e != nil && (e.users > 0 || (e.open && now.Before(e.expires))) {
		if e.argsSum != argsSum {
			return nil, true
		}
		t.unholdLocked(e)
		e.users++
		return e, false
	}
	if old := t.byFP[fp]; old != nil {
		t.forgetLocked(fp, old)
	}
	if len(t.byFP) >= maxKeys {
		t.evictLocked(now)
	}
	t.seq++
	sum := sha256.Sum256([]byte(t.nonce + "\x00" + strconv.FormatUint(t.seq, 10) + "\x00" + fp))
	if isExplicit(fp) {
		// An explicit key is the same in every process.
		sum = sha256.Sum256([]byte(fp))
	}
	e = &keyEntry{key: "mcp-" + base64.RawURLEncoding.EncodeToString(sum[:]), users: 1, argsSum: argsSum, named: action && isExplicit(fp)}
	t.byFP[fp] = e
	return e, false
}

// release ends one call's use of e. definite retires the key once nobody uses it, unless it
// keeps an outcome (finishRun); otherwise it stays open for a retry until keyTTL.
func (t *keyTable) release(fp string, e *keyEntry, definite bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.users--
	switch {
	case e.kept:
		// Open until its outcome's expiry, whatever this call's fate.
	case definite:
		e.open = false
	default:
		e.open, e.expires = true, t.now().Add(keyTTL)
	}
	if e.users == 0 && !e.open {
		t.forgetLocked(fp, e)
	} else {
		t.holdLocked(fp, e)
	}
}

// startRun reports whether the caller is the one to run e's action (no run started yet, or the
// last one's outcome was delivered and a new run is due).
func (t *keyTable) startRun(e *keyEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.running || e.done != nil {
		return false
	}
	e.running, e.done = true, make(chan struct{})
	return true
}

// finishRun records the outcome of fp's action run e and wakes its waiters. A client-named
// call's entry keeps the outcome open for keyTTL from now, unless it is a retryable failure,
// which any entry forgets at once: the calls waiting for it get it, and the next call runs
// again.
func (t *keyTable) finishRun(fp string, e *keyEntry, res *sdk.CallToolResult) {
	size := resultBytes(res)
	t.mu.Lock()
	t.runs++
	e.res, e.running, e.size, e.finished = res, false, size, t.runs
	switch {
	case retryableResult(res):
		// Named or not: an unnamed call whose client gave up left its entry open, and its
		// retry would get this failure instead of the run it invites.
		t.forgetLocked(fp, e)
	case e.named:
		e.kept, e.open, e.expires = true, true, t.now().Add(keyTTL)
	}
	t.holdLocked(fp, e)
	t.mu.Unlock()
	close(e.done)
}

// holdLocked counts the outcome of e, fp's entry, once e holds it for a retry with no call
// using it, against maxHeld: over it, the held outcomes expired or finished first are
// forgotten, and an outcome larger than maxHeld is not held at all.
func (t *keyTable) holdLocked(fp string, e *keyEntry) {
	if e.held || e.res == nil || e.users > 0 || t.byFP[fp] != e {
		return
	}
	if e.size > t.maxHeld {
		t.forgetLocked(fp, e)
		return
	}
	e.held, t.heldBytes = true, t.heldBytes+e.size
	now := t.now()
	for t.heldBytes > t.maxHeld {
		// e is held and fits, so another is held.
		var vfp string
		var v *keyEntry
		for fp, o := range t.byFP {
			if !o.held {
				continue
			}
			if !now.Before(o.expires) {
				vfp, v = fp, o
				break
			}
			if v == nil || o.finished < v.finished {
				vfp, v = fp, o
			}
		}
		t.forgetLocked(vfp, v)
	}
}

// unholdLocked stops counting e's outcome: a call uses e, or e leaves the table.
func (t *keyTable) unholdLocked(e *keyEntry) {
	if e.held {
		e.held, t.heldBytes = false, t.heldBytes-e.size
	}
}

// forgetLocked removes e, fp's entry, from the table.
func (t *keyTable) forgetLocked(fp string, e *keyEntry) {
	t.unholdLocked(e)
	if t.byFP[fp] == e {
		delete(t.byFP, fp)
	}
}

// resultBytes is about what res holds in memory: its texts, its structured content (a
// capability result's is the raw JSON) and its _meta (an error's).
func resultBytes(res *sdk.CallToolResult) int64 {
	n := 0
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			n += len(tc.Text)
		} else {
			b, _ := json.Marshal(c)
			n += len(b)
		}
	}
	switch sc := res.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		n += len(sc)
	default:
		b, _ := json.Marshal(sc)
		n += len(b)
	}
	if res.Meta != nil {
		b, _ := json.Marshal(res.Meta)
		n += len(b)
	}
	return int64(n)
}

// retryableResult reports whether res is an error result whose airlock error is retryable.
func retryableResult(res *sdk.CallToolResult) bool {
	me, ok := res.Meta[MetaError].(*metaError)
	return res.IsError && ok && me.Retryable
}

// evictLocked forgets the unused entries closest to expiry: all expired ones, and at least one.
func (t *keyTable) evictLocked(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for fp, e := range t.byFP {
		if e.users > 0 {
			continue
		}
		if !now.Before(e.expires) {
			t.forgetLocked(fp, e)
			continue
		}
		if oldest == "" || e.expires.Before(oldestAt) {
			oldest, oldestAt = fp, e.expires
		}
	}
	if len(t.byFP) >= maxKeys && oldest != "" {
		t.forgetLocked(oldest, t.byFP[oldest])
	}
}
