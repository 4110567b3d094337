package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Catalog bounds.
const (
	// MaxRecords is the most catalog records the store holds; saving one more new session fails
	// with catalog_full.
	MaxRecords = 4096
	// MaxRecordBytes bounds the JSON of one catalog record and of one manifest.
	MaxRecordBytes = 1 << 20
)

// errNoChange rolls back an Update that found nothing to write, so that it costs no commit.
var errNoChange = errors.New("store: no change")

// cursorEncoding encodes Page cursors. Strict refuses non-canonical trailing bits, so each key
// has exactly one cursor.
var cursorEncoding = base64.RawURLEncoding.Strict()

// Record returns the catalog record of sessionID, or (nil, nil) when there is none.
func (s *Store) Record(sessionID string) (*protocol.CatalogRecord, error) {
	var rec *protocol.CatalogRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketCatalog)
		if err != nil {
			return err
		}
		key := []byte(sessionID)
		v := b.Get(key)
		if v == nil {
			return nil
		}
		rec, err = s.decodeRecord(key, v)
		return err
	})
	if err != nil {
		return nil, s.readErr("read catalog record", err)
	}
	return rec, nil
}

// Records returns every catalog record in sessionId order. A catalog holding more than
// MaxRecords records fails with corrupt_state rather than being read without bound.
func (s *Store) Records() ([]protocol.CatalogRecord, error) {
	var recs []protocol.CatalogRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		recs, err = s.allRecords(tx)
		return err
	})
	if err != nil {
		return nil, s.readErr("read catalog", err)
	}
	return recs, nil
}

func (s *Store) allRecords(tx *bolt.Tx) ([]protocol.CatalogRecord, error) {
	b, err := s.bucket(tx, bucketCatalog)
	if err != nil {
		return nil, err
	}
	var recs []protocol.CatalogRecord
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(recs) == MaxRecords {
			return nil, corrupt("%s: the catalog holds more than %d records", s.path, MaxRecords)
		}
		rec, err := s.decodeRecord(k, v)
		if err != nil {
			return nil, err
		}
		recs = append(recs, *rec)
	}
	return recs, nil
}

// Page returns up to limit records in sessionId order, starting after cursor ("" is the
// start), and the cursor of the next page, "" when this page ends the catalog. A cursor is
// opaque to clients (the base64url of the last key returned) and stays valid when its record
// is deleted. A cursor Page did not issue fails with invalid_field for payload.cursor, a limit
// below 1 with invalid_field for payload.limit.
func (s *Store) Page(cursor string, limit int) (recs []protocol.CatalogRecord, next string, err error) {
	if limit < 1 {
		return nil, "", protocol.Errorf(protocol.CodeInvalidField, "payload.limit must be at least 1").
			With("field", "payload.limit")
	}
	var after []byte
	if cursor != "" {
		after, err = cursorEncoding.DecodeString(cursor)
		// The decoder skips newlines; re-encoding keeps one spelling per cursor.
		if err != nil || len(after) == 0 || cursorEncoding.EncodeToString(after) != cursor {
			return nil, "", protocol.Errorf(protocol.CodeInvalidField, "payload.cursor is not a cursor this host issued").
				With("field", "payload.cursor")
		}
	}
	recs = make([]protocol.CatalogRecord, 0, min(limit, 128))
	err = s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketCatalog)
		if err != nil {
			return err
		}
		c := b.Cursor()
		var k, v []byte
		if after == nil {
			k, v = c.First()
		} else if k, v = c.Seek(after); k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
		var last []byte
		for ; k != nil && len(recs) < limit; k, v = c.Next() {
			rec, err := s.decodeRecord(k, v)
			if err != nil {
				return err
			}
			recs = append(recs, *rec)
			last = k
		}
		if k != nil { // records remain after this page
			next = cursorEncoding.EncodeToString(last)
		}
		return nil
	})
	if err != nil {
		return nil, "", s.readErr("read catalog page", err)
	}
	return recs, next, nil
}

// SaveSession writes rec, and the session's manifest, in one transaction. It sets
// rec.FormatVersion to protocol.CatalogFormatVersion and rec.Revision to the stored revision
// plus one (1 for a new session), and m.FormatVersion to ManifestFormatVersion; it writes these
// back into rec and m only when the transaction commits. A nil m deletes any stored manifest,
// as a retained close does.
//
// It fails with catalog_full when rec is new and the catalog already holds MaxRecords records,
// with catalog_update_failed when rec or m is invalid (no sessionId, m for another session,
// over MaxRecordBytes) or the write fails, and with corrupt_state when the stored record does
// not decode (its revision is unknown, so it is not overwritten).
func (s *Store) SaveSession(rec *protocol.CatalogRecord, m *Manifest) error {
	if rec == nil {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "no catalog record to save")
	}
	id := rec.SessionID
	if !validSessionID(id) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "catalog record has an invalid sessionId (1 to %d characters of UTF-8)", protocol.MaxSessionIDLen)
	}
	next := *rec
	next.FormatVersion = protocol.CatalogFormatVersion
	var manifest []byte
	if m != nil {
		if m.SessionID != id {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "manifest for session %q names another session", id)
		}
		mc := *m
		mc.FormatVersion = ManifestFormatVersion
		var err error
		if manifest, err = json.Marshal(&mc); err != nil {
			return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "manifest of session %q is not serializable", id), err)
		}
		if len(manifest) > MaxRecordBytes {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "manifest of session %q is %d bytes, over the limit of %d", id, len(manifest), MaxRecordBytes)
		}
	}
	key := []byte(id)
	// Saves of different sessions share a commit when they arrive together (store.commit), so
	// a burst of opens, or recovery quarantining many sessions, pays one fsync per group.
	err := s.commit(fmt.Sprintf("cannot save session %q", id), func(tx *bolt.Tx) error {
		catalog, err := s.bucket(tx, bucketCatalog)
		if err != nil {
			return err
		}
		manifests, err := s.bucket(tx, bucketManifests)
		if err != nil {
			return err
		}
		if prev := catalog.Get(key); prev == nil {
			if catalog.Stats().KeyN >= MaxRecords {
				return protocol.Errorf(CodeCatalogFull, "the catalog already holds %d sessions; close sessions with retainSession:false to make room", MaxRecords)
			}
			next.Revision = 1
		} else {
			old, err := s.decodeRecord(key, prev)
			if err != nil {
				return err
			}
			next.Revision = old.Revision + 1
		}
		data, err := json.Marshal(&next)
		if err != nil {
			return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "catalog record of session %q is not serializable", id), err)
		}
		if len(data) > MaxRecordBytes {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "catalog record of session %q is %d bytes, over the limit of %d", id, len(data), MaxRecordBytes)
		}
		if err := catalog.Put(key, data); err != nil {
			return err
		}
		if manifest != nil {
			return manifests.Put(key, manifest)
		}
		return manifests.Delete(key)
	})
	if err != nil {
		if errors.Is(err, &protocol.Error{Code: protocol.CodeDurabilityFailed}) {
			return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "cannot save session %q: writing %s failed", id, s.path), err)
		}
		return s.writeErr(fmt.Sprintf("cannot save session %q", id), err)
	}
	*rec = next
	if m != nil {
		m.FormatVersion = ManifestFormatVersion
	}
	return nil
}

// DeleteSession removes the catalog record, the manifest and the wake journal of sessionID in
// one transaction and reports whether any of them existed. Deleting an absent session writes
// nothing. A later AppendJournal for the same id starts again at seq 1.
func (s *Store) DeleteSession(sessionID string) (existed bool, err error) {
	key := []byte(sessionID)
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketCatalog, bucketManifests} {
			b, err := s.bucket(tx, name)
			if err != nil {
				return err
			}
			if b.Get(key) == nil {
				continue
			}
			existed = true
			if err := b.Delete(key); err != nil {
				return err
			}
		}
		journal, err := s.bucket(tx, bucketJournal)
		if err != nil {
			return err
		}
		if journal.Bucket(key) != nil {
			existed = true
			if err := journal.DeleteBucket(key); err != nil {
				return err
			}
		}
		if !existed {
			return errNoChange
		}
		return nil
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return false, s.writeErr(fmt.Sprintf("cannot delete session %q", sessionID), err)
	}
	return existed, nil
}

// MarkAllDormant is the startup step that records that no session runtime survived the
// restart: in one transaction, every record with residency resident becomes dormant with
// state idle, its revision bumped and updatedAt set to now. It returns every record after the
// change, in sessionId order. Any record that does not decode fails the whole call with
// corrupt_state and changes nothing.
func (s *Store) MarkAllDormant() ([]protocol.CatalogRecord, error) {
	now := s.now()
	var recs []protocol.CatalogRecord
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		if recs, err = s.allRecords(tx); err != nil {
			return err
		}
		b, err := s.bucket(tx, bucketCatalog)
		if err != nil {
			return err
		}
		changed := false
		// Put only after the cursor in allRecords is done: bbolt cursors do not survive writes.
		for i := range recs {
			r := &recs[i]
			if r.Residency != protocol.Resident {
				continue
			}
			r.Residency = protocol.Dormant
			r.State = protocol.StateIdle
			r.Revision++
			r.UpdatedAt = now
			data, err := json.Marshal(r)
			if err != nil {
				return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "catalog record of session %q is not serializable", r.SessionID), err)
			}
			if err := b.Put([]byte(r.SessionID), data); err != nil {
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
		return nil, s.writeErr("cannot mark sessions dormant", err)
	}
	return recs, nil
}

// decodeRecord strictly decodes the catalog value v stored under key.
func (s *Store) decodeRecord(key, v []byte) (*protocol.CatalogRecord, error) {
	if len(v) > MaxRecordBytes {
		return nil, corrupt("%s: catalog record of session %q is larger than %d bytes", s.path, key, MaxRecordBytes)
	}
	var rec protocol.CatalogRecord
	if err := ndjson.Decode(v, &rec, ndjson.Closed); err != nil {
		return nil, protocol.Wrap(corrupt("%s: catalog record of session %q does not decode", s.path, key), decodeCause(err))
	}
	if rec.SessionID != string(key) {
		return nil, corrupt("%s: catalog record stored under session %q names another session", s.path, key)
	}
	if rec.FormatVersion != protocol.CatalogFormatVersion {
		return nil, corrupt("%s: catalog record of session %q has unknown formatVersion %d", s.path, key, rec.FormatVersion)
	}
	return &rec, nil
}

// bucket returns a top-level bucket that Open has already checked exists; it can only be
// missing if another program edited the file since.
func (s *Store) bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, corrupt("%s lacks the %s bucket", s.path, name)
	}
	return b, nil
}

// readErr passes a coded error through and wraps anything else (a closed store, I/O) with the
// operation for the log; the daemon maps it to internal_error.
func (s *Store) readErr(op string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return fmt.Errorf("store: %s in %s: %w", op, s.path, err)
}

// writeErr passes a coded error through and classes anything else, a failed bbolt write or
// commit, as catalog_update_failed.
func (s *Store) writeErr(msg string, err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return err
	}
	return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "%s: writing %s failed", msg, s.path), err)
}

func validSessionID(id string) bool {
	return id != "" && utf8.ValidString(id) && utf8.RuneCountInString(id) <= protocol.MaxSessionIDLen
}

// SettleRecovery is the last catalog step of startup recovery, one transaction: each session
// in dormant, which was resident but did not come back, becomes dormant and idle; each in
// quarantine becomes dormant and idle with that recovery condition. Every changed record has its
// revision bumped and updatedAt set to now. Sessions recovery restored are not named: their
// records already say resident. A named session without a record fails the whole call with
// catalog_update_failed and changes nothing; so does a record that does not decode
// (corrupt_state).
func (s *Store) SettleRecovery(dormant []string, quarantine map[string]protocol.RecoveryCondition) error {
	if len(dormant) == 0 && len(quarantine) == 0 {
		return nil
	}
	now := s.now()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketCatalog)
		if err != nil {
			return err
		}
		settle := func(id string, cond *protocol.RecoveryCondition) error {
			key := []byte(id)
			v := b.Get(key)
			if v == nil {
				return protocol.Errorf(protocol.CodeCatalogUpdate, "session %q has no catalog record to settle", id)
			}
			rec, err := s.decodeRecord(key, v)
			if err != nil {
				return err
			}
			rec.Residency, rec.State = protocol.Dormant, protocol.StateIdle
			if cond != nil {
				rec.Recovery = cond
			}
			rec.Revision++
			rec.UpdatedAt = now
			data, err := json.Marshal(rec)
			if err != nil {
				return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "catalog record of session %q is not serializable", id), err)
			}
			return b.Put(key, data)
		}
		for _, id := range dormant {
			if err := settle(id, nil); err != nil {
				return err
			}
		}
		for id, cond := range quarantine {
			if err := settle(id, &cond); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.writeErr("cannot settle the catalog after recovery", err)
	}
	return nil
}
