package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Registration bounds. They are the store's own limits, loose enough for any registration
// the capability adapter supervisor accepts (which checks its stricter rules before a
// registration reaches the store) and tight enough that a damaged file cannot make the
// daemon read without bound.
const (
	// MaxRegistrations is the most adapter registrations the store holds.
	MaxRegistrations = 256
	// MaxRegistrationBytes bounds the JSON of one registration.
	MaxRegistrationBytes = 64 << 10
	// MaxRegistrationNameBytes bounds a registration's name, which is also its key.
	MaxRegistrationNameBytes = 64
	// maxRecordedCapabilities bounds Registration.Capabilities: an adapter serves at most 8.
	maxRecordedCapabilities = 8
	// maxPassEnv bounds Registration.PassEnv: the supervisor accepts at most 16 names.
	maxPassEnv = 16
	// maxPassEnvNameBytes bounds each name of Registration.PassEnv.
	maxPassEnvNameBytes = 64
)

// RegistrationVersion is the version of the registration record this build reads and
// writes. Version 1 records ({name, command, args}, schema ≤ 3) are rewritten as version 2
// by the schema 4 migration, with no digests: the supervisor records them at the
// registration's first start after the upgrade.
const RegistrationVersion = 2

// Registration is a capability adapter registration, the operator's local execution approval:
// an adapter name, the command and its argv, the SHA-256 of the files approved to run and,
// for a temporary adapter, its tie and lease, and the names of the environment variables it
// is passed. Nothing else is stored: no environment value, no adapter configuration, no
// descriptor, no file contents.
type Registration struct {
	// Version is RegistrationVersion; PutRegistration sets it.
	Version int      `json:"version"`
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args"`

	Room         string    `json:"room,omitempty"`
	Session      string    `json:"session,omitempty"`
	Generation   int64     `json:"generation,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`

	Digests []FileDigest `json:"digests,omitempty"`

	// PassEnv are the names of the variables the adapter gets from the daemon's environment
	// (capclient.Registration.PassEnv); never their values. Records stored before it existed
	// have none.
	PassEnv []string `json:"passEnv,omitempty"`

	// Capabilities are the capability ids the registration served when it was last
	// registered or approved, so that its publications can be withdrawn when it ends without
	// its child running (a lease that ended while the daemon was down, say). Records stored
	// before they were recorded have none.
	Capabilities []string `json:"capabilities,omitempty"`
}

// FileDigest is the recorded SHA-256 of one file of a registration: role "executable" or
// "script", its absolute path, and 64 lowercase hex digits.
type FileDigest struct {
	Role   string `json:"role"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

// legacyRegistration is a version 1 record, as schemas 2 and 3 stored it.
type legacyRegistration struct {
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// PutRegistration stores r under r.Name, replacing any registration of that name, in one
// transaction. It fails with catalog_update_failed when r is invalid (a name that is empty,
// longer than MaxRegistrationNameBytes, not UTF-8 or holding a NUL; an empty command; JSON
// over MaxRegistrationBytes), when the store already holds MaxRegistrations other
// registrations, or when the write fails.
func (s *Store) PutRegistration(r Registration) error {
	if !validRegistrationName(r.Name) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration has an invalid name (1 to %d bytes of UTF-8 without NUL)", MaxRegistrationNameBytes)
	}
	if r.Command == "" {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q has no command", r.Name)
	}
	rc := r
	rc.Version, rc.Args = RegistrationVersion, append([]string{}, r.Args...)
	if len(rc.Capabilities) > maxRecordedCapabilities {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q records more than %d capabilities", r.Name, maxRecordedCapabilities)
	}
	if !validDigests(rc.Digests) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q has an invalid digest", r.Name)
	}
	if !validPassEnv(rc.PassEnv) {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q names an invalid environment variable or more than %d", r.Name, maxPassEnv)
	}
	data, err := json.Marshal(&rc)
	if err != nil {
		return protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q is not serializable", r.Name), err)
	}
	if len(data) > MaxRegistrationBytes {
		return protocol.Errorf(protocol.CodeCatalogUpdate, "registration %q is %d bytes, over the limit of %d", r.Name, len(data), MaxRegistrationBytes)
	}
	key := []byte(r.Name)
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRegistrations)
		if err != nil {
			return err
		}
		if b.Get(key) == nil && b.Stats().KeyN >= MaxRegistrations {
			return protocol.Errorf(protocol.CodeCatalogUpdate, "the store already holds %d adapter registrations", MaxRegistrations)
		}
		return b.Put(key, data)
	})
	if err != nil {
		return s.writeErr(fmt.Sprintf("cannot save registration %q", r.Name), err)
	}
	return nil
}

// DeleteRegistration removes the registration called name and reports whether it existed.
// Deleting an absent registration writes nothing.
func (s *Store) DeleteRegistration(name string) (existed bool, err error) {
	key := []byte(name)
	err = s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRegistrations)
		if err != nil {
			return err
		}
		if b.Get(key) == nil {
			return errNoChange
		}
		existed = true
		return b.Delete(key)
	})
	if err != nil && !errors.Is(err, errNoChange) {
		return false, s.writeErr(fmt.Sprintf("cannot delete registration %q", name), err)
	}
	return existed, nil
}

// Registrations returns every stored registration in name order. A registration that does
// not decode strictly, is stored under another name or has no command, and a bucket holding
// more than MaxRegistrations entries, fail the whole call with corrupt_state.
func (s *Store) Registrations() ([]Registration, error) {
	var regs []Registration
	err := s.db.View(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, bucketRegistrations)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(regs) == MaxRegistrations {
				return corrupt("%s: the registrations bucket holds more than %d entries", s.path, MaxRegistrations)
			}
			r, err := s.decodeRegistration(k, v)
			if err != nil {
				return err
			}
			regs = append(regs, *r)
		}
		return nil
	})
	if err != nil {
		return nil, s.readErr("read registrations", err)
	}
	return regs, nil
}

func (s *Store) decodeRegistration(key, v []byte) (*Registration, error) {
	if len(v) > MaxRegistrationBytes {
		return nil, corrupt("%s: registration %q is larger than %d bytes", s.path, key, MaxRegistrationBytes)
	}
	var r Registration
	if err := ndjson.Decode(v, &r, ndjson.Closed); err != nil {
		return nil, protocol.Wrap(corrupt("%s: registration %q does not decode", s.path, key), decodeCause(err))
	}
	if r.Name != string(key) {
		return nil, corrupt("%s: registration stored under %q names another adapter", s.path, key)
	}
	if r.Command == "" || r.Args == nil {
		return nil, corrupt("%s: registration %q lacks its command or args", s.path, key)
	}
	if r.Version != RegistrationVersion {
		return nil, corrupt("%s: registration %q has version %d, not %d", s.path, key, r.Version, RegistrationVersion)
	}
	if !validDigests(r.Digests) {
		return nil, corrupt("%s: registration %q has an invalid digest", s.path, key)
	}
	if len(r.Capabilities) > maxRecordedCapabilities {
		return nil, corrupt("%s: registration %q records more than %d capabilities", s.path, key, maxRecordedCapabilities)
	}
	if !validPassEnv(r.PassEnv) {
		return nil, corrupt("%s: registration %q names an invalid environment variable or more than %d", s.path, key, maxPassEnv)
	}
	return &r, nil
}

func validDigests(ds []FileDigest) bool {
	if len(ds) > 2 {
		return false
	}
	for _, d := range ds {
		if (d.Role != "executable" && d.Role != "script") || d.Path == "" || len(d.SHA256) != 64 ||
			strings.Trim(d.SHA256, "0123456789abcdef") != "" {
			return false
		}
	}
	return true
}

// migrateRegistrationsV2 rewrites every version 1 registration as version 2, in the
// migration's transaction. A record that is not a valid version 1 registration fails the
// migration (corrupt_state), leaving the file at its old schema.
func migrateRegistrationsV2(tx *bolt.Tx) error {
	b := tx.Bucket(bucketRegistrations)
	if b == nil {
		return fmt.Errorf("bucket %s missing", bucketRegistrations)
	}
	type kv struct{ k, v []byte }
	var rewrite []kv
	err := b.ForEach(func(k, v []byte) error {
		if len(v) > MaxRegistrationBytes {
			return corrupt("registration %q is larger than %d bytes", k, MaxRegistrationBytes)
		}
		var old legacyRegistration
		if err := ndjson.Decode(v, &old, ndjson.Closed); err != nil || old.Name != string(k) || old.Command == "" || old.Args == nil {
			return corrupt("registration %q is not a version 1 registration", k)
		}
		data, err := json.Marshal(&Registration{Version: RegistrationVersion, Name: old.Name, Command: old.Command, Args: old.Args})
		if err != nil {
			return err
		}
		rewrite = append(rewrite, kv{append([]byte(nil), k...), data})
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range rewrite { // not inside ForEach: bbolt forbids changing a bucket it iterates
		if err := b.Put(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// validPassEnv is the store's own, looser check of PassEnv names (the supervisor's is
// capclient.CheckPassEnv): bounded in number and length, and names that cannot smuggle a
// value into the child's environment (no "=", no NUL, ASCII letters, digits and underscore).
func validPassEnv(names []string) bool {
	if len(names) > maxPassEnv {
		return false
	}
	for _, n := range names {
		if n == "" || len(n) > maxPassEnvNameBytes || strings.Trim(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return false
		}
	}
	return true
}

func validRegistrationName(name string) bool {
	return name != "" && len(name) <= MaxRegistrationNameBytes && utf8.ValidString(name) && !strings.ContainsRune(name, 0)
}
