package store

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// ManifestFormatVersion is the format of Manifest.
const ManifestFormatVersion = 1

// Manifest is what a restarted daemon needs to reopen a session generation: its open policy and
// versions. It is secret-free: a capability handle or credential never goes into a Manifest.
type Manifest struct {
	FormatVersion   int             `json:"formatVersion"`
	ProtocolVersion string          `json:"protocolVersion"`
	SessionID       string          `json:"sessionId"`
	Generation      int64           `json:"generation"`
	Policy          protocol.Policy `json:"policy"`
	// Conversation is the transcript of the generation, which a restart reopens exactly.
	Conversation *protocol.ConversationRef `json:"conversation,omitempty"`
	CreatedAt    time.Time                 `json:"createdAt"`
	UpdatedAt    time.Time                 `json:"updatedAt"`
}

// Manifest returns the manifest of sessionID, or (nil, nil) when there is none. A stored
// manifest that does not decode strictly, names another session or has an unknown
// formatVersion fails with corrupt_state.
func (s *Store) Manifest(sessionID string) (*Manifest, error) {
	var m *Manifest
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketManifests)
		if err != nil {
			return err
		}
		key := []byte(sessionID)
		v := b.Get(key)
		if v == nil {
			return nil
		}
		m, err = s.decodeManifest(key, v)
		return err
	})
	if err != nil {
		return nil, s.readErr("read manifest", err)
	}
	return m, nil
}

func (s *Store) decodeManifest(key, v []byte) (*Manifest, error) {
	if len(v) > MaxRecordBytes {
		return nil, corrupt("%s: manifest of session %q is larger than %d bytes", s.path, key, MaxRecordBytes)
	}
	var m Manifest
	if err := ndjson.Decode(v, &m, ndjson.Closed); err != nil {
		return nil, protocol.Wrap(corrupt("%s: manifest of session %q does not decode", s.path, key), decodeCause(err))
	}
	if m.SessionID != string(key) {
		return nil, corrupt("%s: manifest stored under session %q names another session", s.path, key)
	}
	if m.FormatVersion != ManifestFormatVersion {
		return nil, corrupt("%s: manifest of session %q has unknown formatVersion %d", s.path, key, m.FormatVersion)
	}
	return &m, nil
}

// Manifests returns every stored manifest by session id, read in one transaction: recovery
// needs them all. A manifest that does not decode fails the whole call with corrupt_state.
func (s *Store) Manifests() (map[string]*Manifest, error) {
	out := make(map[string]*Manifest)
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketManifests)
		if err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error {
			if len(out) == MaxRecords {
				return corrupt("%s: more than %d manifests", s.path, MaxRecords)
			}
			m, err := s.decodeManifest(k, v)
			if err != nil {
				return err
			}
			out[m.SessionID] = m
			return nil
		})
	})
	if err != nil {
		return nil, s.readErr("read manifests", err)
	}
	return out, nil
}
