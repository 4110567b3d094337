package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Journal states. A wake is queued when admitted, accepted once its runtime took it, and then
// completed or failed. An accepted wake whose daemon died is indeterminate until an operator
// reconciles it to completed or failed.
const (
	JournalQueued        = "queued"
	JournalAccepted      = "accepted"
	JournalCompleted     = "completed"
	JournalFailed        = "failed"
	JournalIndeterminate = "indeterminate"
)

// JournalFormatVersion is the format of JournalEntry.
const JournalFormatVersion = 1

// Journal bounds. They keep a damaged file from making the daemon read without bound.
const (
	// MaxJournalRecordBytes bounds the JSON of one entry. AppendJournal and UpdateJournal count
	// it with the fields the store itself changes later (state, reconciled, updatedAt, seq) at
	// their longest, so an entry never outgrows it as it moves through its states.
	MaxJournalRecordBytes = 1 << 20
	// MaxJournalEntries bounds the entries of all sessions together: a full catalog with 288
	// entries each (one every five minutes for a day).
	MaxJournalEntries = MaxRecords * 288
	// MaxJournalBytes bounds the JSON of all entries together.
	MaxJournalBytes = 256 << 20
)

// JournalEntry is one durable wake. Secret-free: a credential or capability handle never goes
// into a JournalEntry.
type JournalEntry struct {
	FormatVersion  int             `json:"formatVersion"`
	Seq            uint64          `json:"seq"` // assigned by AppendJournal: per session, increasing
	SessionID      string          `json:"sessionId"`
	Generation     int64           `json:"generation"`
	IdempotencyKey string          `json:"idempotencyKey"`
	RequestID      string          `json:"requestId"`
	TicketID       string          `json:"ticketId"`
	Fingerprint    string          `json:"fingerprint"`
	State          string          `json:"state"`
	Prompt         string          `json:"prompt"`
	Source         string          `json:"source,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          *protocol.Error `json:"error,omitempty"`
	Reconciled     bool            `json:"reconciled,omitempty"` // terminal state set by an operator's reconcile
}

// journalTransitions lists the states each state may move to.
var journalTransitions = map[string][]string{
	JournalQueued:        {JournalAccepted, JournalFailed},
	JournalAccepted:      {JournalCompleted, JournalFailed, JournalIndeterminate},
	JournalIndeterminate: {JournalCompleted, JournalFailed},
	JournalCompleted:     nil,
	JournalFailed:        nil,
}

func knownJournalState(state string) bool {
	_, ok := journalTransitions[state]
	return ok
}

func journalTransitionAllowed(from, to string) bool {
	for _, s := range journalTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

func terminalJournalState(state string) bool {
	return state == JournalCompleted || state == JournalFailed
}

// AppendJournal durably records e, a new wake, and returns it with Seq (one more than the last
// seq handed out in its session, 1 for the first) and FormatVersion set; a zero CreatedAt
// becomes now and a zero UpdatedAt becomes CreatedAt. The write is group-committed with
// concurrent journal writes: it returns once an fsynced transaction holds it.
//
// It fails with invalid_journal_transition when e.State is not queued, journal_record_too_large
// when e's JSON is over MaxJournalRecordBytes (checked before any write), corrupt_journal when
// the session's journal is damaged so that the next seq is already taken (an entry is never
// overwritten), and durability_failed when e has an invalid sessionId or does not serialize to
// JSON the store reads back, or when the commit failed.
func (s *Store) AppendJournal(e JournalEntry) (JournalEntry, error) {
	id := e.SessionID
	if !validSessionID(id) {
		return JournalEntry{}, protocol.Errorf(protocol.CodeDurabilityFailed,
			"journal entry has an invalid sessionId (1 to %d characters of UTF-8)", protocol.MaxSessionIDLen)
	}
	if e.State != JournalQueued {
		return JournalEntry{}, protocol.Errorf(protocol.CodeInvalidJournalTransition,
			"a new journal entry of session %q must be %s", id, JournalQueued).With("to", e.State)
	}
	e.FormatVersion = JournalFormatVersion
	e.Seq = 0
	if e.CreatedAt.IsZero() {
		e.CreatedAt = s.now()
	}
	if e.UpdatedAt.IsZero() {
		e.UpdatedAt = e.CreatedAt
	}
	if err := checkJournalSize(&e, true); err != nil {
		return JournalEntry{}, err
	}
	key := []byte(id)
	err := s.commit(fmt.Sprintf("cannot journal a wake of session %q", id), func(tx *bolt.Tx) error {
		journal, err := s.bucket(tx, bucketJournal)
		if err != nil {
			return err
		}
		if journal.Get(key) != nil {
			return corruptJournal("%s: the journal holds a value, not a bucket, for session %q", s.path, key)
		}
		b := journal.Bucket(key)
		seq := uint64(1)
		if b != nil {
			seq = b.Sequence() + 1
			if b.Get(seqKey(seq)) != nil {
				return corruptJournal("%s: the journal of session %q already holds seq %d, past its last sequence", s.path, key, seq)
			}
		}
		e.Seq = seq
		data, err := json.Marshal(&e)
		if err != nil {
			return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "journal entry of session %q is not serializable", id), err)
		}
		if b == nil {
			if b, err = journal.CreateBucket(key); err != nil {
				return err
			}
		}
		if err := b.SetSequence(seq); err != nil {
			return err
		}
		return b.Put(seqKey(seq), data)
	})
	if err != nil {
		return JournalEntry{}, err
	}
	return e, nil
}

// UpdateJournal moves the entry (sessionID, seq) to state to, sets its UpdatedAt to now, and
// sets its Result and Error to result and e when they are not nil; a move to completed or failed
// also drops the entry's Prompt, which only a queued wake needs. In the same group-committed
// transaction it deletes the entries of the same session listed in prune, terminal entries the
// caller retires; a missing one is skipped, and so is seq itself. It returns the updated entry.
//
// The allowed moves are queued to accepted or failed; accepted to completed, failed or
// indeterminate; and indeterminate to completed or failed, an operator's reconcile, which also
// sets Reconciled. It fails with journal_entry_missing when the entry does not exist,
// invalid_journal_transition (details from, to) for any other move and for a prune of an entry
// that is not completed or failed (details seq, from, to "pruned"), journal_record_too_large
// when the updated entry's JSON would be over MaxJournalRecordBytes, corrupt_journal when the
// entry or one to prune does not decode, and durability_failed when result is not one JSON value
// without duplicate keys, e does not serialize, or the commit failed. A refused update writes
// nothing, not even its prunes.
func (s *Store) UpdateJournal(sessionID string, seq uint64, to string, result json.RawMessage, e *protocol.Error, prune []uint64) (JournalEntry, error) {
	what := fmt.Sprintf("cannot update journal entry %d of session %q", seq, sessionID)
	if result != nil {
		if err := ndjson.Valid(result); err != nil {
			return JournalEntry{}, protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: its result is not one JSON value without duplicate keys", what), decodeCause(err))
		}
	}
	if e != nil {
		data, err := json.Marshal(e)
		if err != nil {
			return JournalEntry{}, protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: its error is not serializable", what), err)
		}
		if err := ndjson.Decode(data, new(protocol.Error), ndjson.Closed); err != nil {
			return JournalEntry{}, protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: its error does not read back", what), decodeCause(err))
		}
	}
	now := s.now()
	session := []byte(sessionID)
	var out JournalEntry
	err := s.commit(what, func(tx *bolt.Tx) error {
		journal, err := s.bucket(tx, bucketJournal)
		if err != nil {
			return err
		}
		b := journal.Bucket(session)
		var v []byte
		if b != nil {
			v = b.Get(seqKey(seq))
		}
		if v == nil {
			return protocol.Errorf(protocol.CodeJournalEntryMissing, "session %q has no journal entry %d", sessionID, seq).
				With("seq", seq)
		}
		cur, err := s.decodeJournal(session, seqKey(seq), v)
		if err != nil {
			return err
		}
		if !journalTransitionAllowed(cur.State, to) {
			return protocol.Errorf(protocol.CodeInvalidJournalTransition, "journal entry %d of session %q cannot move from %s to %q", seq, sessionID, cur.State, to).
				With("from", cur.State).With("to", to)
		}
		for _, p := range prune {
			if p == seq {
				continue
			}
			pv := b.Get(seqKey(p))
			if pv == nil {
				continue
			}
			old, err := s.decodeJournal(session, seqKey(p), pv)
			if err != nil {
				return err
			}
			if !terminalJournalState(old.State) {
				return protocol.Errorf(protocol.CodeInvalidJournalTransition, "journal entry %d of session %q is %s, not terminal, and cannot be pruned", p, sessionID, old.State).
					With("seq", p).With("from", old.State).With("to", "pruned")
			}
		}
		next := *cur
		if cur.State == JournalIndeterminate {
			next.Reconciled = true
		}
		next.State = to
		next.UpdatedAt = now
		if terminalJournalState(to) {
			// Only a queued wake runs from its entry (after a restart): an ended one needs
			// its outcome, not its prompt. Kept, the prompts of every session's retained
			// entries would add up past MaxJournalBytes, which recovery then refuses, and
			// a large prompt with a large result would not fit MaxJournalRecordBytes.
			next.Prompt = ""
		}
		if result != nil {
			next.Result = result
		}
		if e != nil {
			next.Error = e
		}
		// result and e were checked to read back above; the rest was read from the store.
		if err := checkJournalSize(&next, false); err != nil {
			return err
		}
		data, err := json.Marshal(&next)
		if err != nil {
			return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: the entry is not serializable", what), err)
		}
		// Every check is done: from here on the op writes.
		if err := b.Put(seqKey(seq), data); err != nil {
			return err
		}
		for _, p := range prune {
			if p == seq {
				continue
			}
			if err := b.Delete(seqKey(p)); err != nil {
				return err
			}
		}
		out = next
		return nil
	})
	if err != nil {
		return JournalEntry{}, err
	}
	return out, nil
}

// JournalEntry returns the journal entry (sessionID, seq), or (nil, nil) when there is none. A
// stored entry that fails the checks of RecoverJournal fails with corrupt_journal.
func (s *Store) JournalEntry(sessionID string, seq uint64) (*JournalEntry, error) {
	var e *JournalEntry
	err := s.db.View(func(tx *bolt.Tx) error {
		journal, err := s.bucket(tx, bucketJournal)
		if err != nil {
			return err
		}
		session := []byte(sessionID)
		b := journal.Bucket(session)
		if b == nil {
			return nil
		}
		key := seqKey(seq)
		v := b.Get(key)
		if v == nil {
			return nil
		}
		e, err = s.decodeJournal(session, key, v)
		return err
	})
	if err != nil {
		return nil, s.readErr("read journal entry", err)
	}
	return e, nil
}

// RecoverJournal is the startup step that records that no wake in flight survived the restart:
// in one transaction, every accepted entry becomes indeterminate with UpdatedAt set to now. It
// returns every entry after the change, sessions in sessionId order and each session's entries
// in Seq order.
//
// It fails with corrupt_journal, and changes nothing, when the journal holds more than
// MaxJournalEntries entries or MaxJournalBytes of JSON, a value where a session's bucket
// belongs, or an entry that is over MaxJournalRecordBytes, does not decode strictly, names
// another session, has a seq other than its key, or has an unknown formatVersion or state.
func (s *Store) RecoverJournal() ([]JournalEntry, error) {
	now := s.now()
	var entries []JournalEntry
	err := s.db.Update(func(tx *bolt.Tx) error {
		journal, err := s.bucket(tx, bucketJournal)
		if err != nil {
			return err
		}
		var refs []journalRef
		total := 0
		c := journal.Cursor()
		for session, v := c.First(); session != nil; session, v = c.Next() {
			if v != nil {
				return corruptJournal("%s: the journal holds a value, not a bucket, for session %q", s.path, session)
			}
			sc := journal.Bucket(session).Cursor()
			for k, v := sc.First(); k != nil; k, v = sc.Next() {
				if v == nil {
					return corruptJournal("%s: the journal of session %q holds a nested bucket", s.path, session)
				}
				if len(refs) == MaxJournalEntries {
					return corruptJournal("%s: the journal holds more than %d entries", s.path, MaxJournalEntries)
				}
				if total += len(v); total > MaxJournalBytes {
					return corruptJournal("%s: the journal holds more than %d bytes of entries", s.path, MaxJournalBytes)
				}
				refs = append(refs, journalRef{session, k, v})
			}
		}
		if entries, err = s.decodeJournalRefs(refs); err != nil {
			return err
		}
		changed := false
		// Put only after the cursors are done: bbolt cursors do not survive writes.
		for i := range entries {
			e := &entries[i]
			if e.State != JournalAccepted {
				continue
			}
			e.State = JournalIndeterminate
			e.UpdatedAt = now
			data, err := json.Marshal(e)
			if err != nil {
				return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "journal entry %d of session %q is not serializable", e.Seq, e.SessionID), err)
			}
			if err := journal.Bucket([]byte(e.SessionID)).Put(seqKey(e.Seq), data); err != nil {
				return err
			}
			changed = true
		}
		if !changed {
			return errNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return nil, s.durabilityErr("cannot recover the journal", err)
	}
	return entries, nil
}

// journalRef locates one stored entry; its slices point into the database and are valid only
// for the transaction that read them.
type journalRef struct{ session, key, value []byte }

// decodeJournalRefs decodes refs, in parallel when there are many: strict decoding is most of
// the cost of a recovery, and a full journal holds over a million entries. It reports the
// error of the first entry, in refs order, that fails.
func (s *Store) decodeJournalRefs(refs []journalRef) ([]JournalEntry, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	entries := make([]JournalEntry, len(refs))
	const minChunk = 512
	workers := max(1, min(runtime.GOMAXPROCS(0), len(refs)/minChunk))
	chunk := (len(refs) + workers - 1) / workers
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w * chunk; i < min((w+1)*chunk, len(refs)); i++ {
				r := refs[i]
				e, err := s.decodeJournal(r.session, r.key, r.value)
				if err != nil {
					errs[w] = err // the first failure of this chunk; chunks are in order
					return
				}
				entries[i] = *e
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// decodeJournal strictly decodes the journal value v stored under key in session's bucket.
func (s *Store) decodeJournal(session, key, v []byte) (*JournalEntry, error) {
	if len(key) != 8 {
		return nil, corruptJournal("%s: the journal of session %q holds a key that is not a seq", s.path, session)
	}
	seq := binary.BigEndian.Uint64(key)
	if len(v) > MaxJournalRecordBytes {
		return nil, corruptJournal("%s: journal entry %d of session %q is larger than %d bytes", s.path, seq, session, MaxJournalRecordBytes)
	}
	var e JournalEntry
	if err := ndjson.Decode(v, &e, ndjson.Closed); err != nil {
		return nil, protocol.Wrap(corruptJournal("%s: journal entry %d of session %q does not decode", s.path, seq, session), decodeCause(err))
	}
	if e.SessionID != string(session) {
		return nil, corruptJournal("%s: journal entry %d stored under session %q names another session", s.path, seq, session)
	}
	if e.Seq != seq {
		return nil, corruptJournal("%s: journal entry %d of session %q is stored under seq %d", s.path, e.Seq, session, seq)
	}
	if e.FormatVersion != JournalFormatVersion {
		return nil, corruptJournal("%s: journal entry %d of session %q has unknown formatVersion %d", s.path, seq, session, e.FormatVersion)
	}
	if !knownJournalState(e.State) {
		return nil, corruptJournal("%s: journal entry %d of session %q has an unknown state", s.path, seq, session)
	}
	return &e, nil
}

// checkJournalSize fails with journal_record_too_large when e's JSON could grow over
// MaxJournalRecordBytes through the changes the store makes by itself and, with readBack, with
// durability_failed when it does not decode strictly. It measures e with its longest state,
// reconciled set, the longest timestamps and the largest seq, so an entry that passes fits
// whatever state and times it has later; only a new result or error can grow it further, and
// UpdateJournal checks again.
func checkJournalSize(e *JournalEntry, readBack bool) error {
	worst := *e
	worst.Seq = math.MaxUint64
	worst.State = JournalIndeterminate
	worst.Reconciled = true
	worst.CreatedAt, worst.UpdatedAt = longestTime, longestTime
	data, err := json.Marshal(&worst)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "journal entry of session %q is not serializable", e.SessionID), err)
	}
	if len(data) > MaxJournalRecordBytes {
		return protocol.Errorf(protocol.CodeJournalRecordTooLarge, "journal entry of session %q is %d bytes, over the limit of %d",
			e.SessionID, len(data), MaxJournalRecordBytes).With("limit", MaxJournalRecordBytes)
	}
	if !readBack {
		return nil
	}
	if err := ndjson.Decode(data, new(JournalEntry), ndjson.Closed); err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "journal entry of session %q would not read back", e.SessionID), decodeCause(err))
	}
	return nil
}

// longestTime has the longest RFC 3339 form time.Time marshals: nine digits of fraction and a
// numeric offset.
var longestTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))

// seqKey is the key of seq in a session's journal bucket: 8 bytes big-endian, so that keys sort
// in seq order.
func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

func corruptJournal(format string, args ...any) *protocol.Error {
	return protocol.Errorf(protocol.CodeCorruptJournal, format, args...)
}

// durabilityErr passes a coded error through and classes anything else, a failed bbolt write or
// commit, as durability_failed.
func (s *Store) durabilityErr(msg string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return protocol.Wrap(protocol.Errorf(protocol.CodeDurabilityFailed, "%s: writing %s failed", msg, s.path), err)
}
