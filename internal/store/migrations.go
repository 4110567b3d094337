package store

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Bucket and key names; doc.go draws them as a tree.
var (
	bucketMeta      = []byte("meta")
	bucketCatalog   = []byte("catalog")
	bucketManifests = []byte("manifests")
	// bucketRegistrations holds capability adapter registrations (schema 2).
	bucketRegistrations = []byte("registrations")
	// bucketJournal holds one nested bucket of wake journal entries per session (schema 3).
	bucketJournal = []byte("journal")
	// bucketRooms holds the rooms this host created or joined (schema 5).
	bucketRooms = []byte("rooms")
	// bucketPublications holds this host's publications of capabilities into rooms (schema 5).
	bucketPublications = []byte("publications")
	// bucketCallFloors holds the room providers' call floor leases, per caller (schema 6).
	bucketCallFloors = []byte("callFloors")
	// bucketBusHosts holds the other hosts admitted to this host's embedded room bus
	// (schema 7).
	bucketBusHosts = []byte("bus_hosts")

	keyFormat        = []byte("format")
	keySchemaVersion = []byte("schemaVersion")
	keyCreatedAt     = []byte("createdAt")
)

// formatName is meta/format of every airlock state database. A bbolt file without it belongs to
// someone else and is never written to.
const formatName = "airlock-state"

// migration moves the schema from version-1 to version. Migrations run in order inside the one
// transaction that also writes meta/schemaVersion, so a crash leaves the old schema intact.
//
// Every migration needs an entry in migrationTests (migrations_test.go); TestMigrations fails
// when the counts differ.
type migration struct {
	version int
	name    string
	migrate func(tx *bolt.Tx) error
}

var migrations = []migration{
	{version: 1, name: "create catalog and manifests buckets", migrate: migrateV1},
	{version: 2, name: "create registrations bucket", migrate: migrateV2},
	{version: 3, name: "create journal bucket", migrate: migrateV3},
	{version: 4, name: "rewrite registrations as version 2 records", migrate: migrateRegistrationsV2},
	{version: 5, name: "create rooms and publications buckets", migrate: migrateV5},
	{version: 6, name: "create callFloors bucket", migrate: migrateV6},
	{version: 7, name: "create bus_hosts bucket", migrate: migrateV7},
}

func migrateV1(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketCatalog, bucketManifests} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	return nil
}

func migrateV2(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketRegistrations); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketRegistrations, err)
	}
	return nil
}

func migrateV3(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketJournal); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketJournal, err)
	}
	return nil
}

func migrateV5(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketRooms, bucketPublications} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	return nil
}

func migrateV6(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketCallFloors); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketCallFloors, err)
	}
	return nil
}

func migrateV7(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketBusHosts); err != nil {
		return fmt.Errorf("create bucket %s: %w", bucketBusHosts, err)
	}
	return nil
}

// latestSchema is the schema version this build writes and the newest it can read.
func latestSchema() int { return migrations[len(migrations)-1].version }

// errSkip rolls back the schema transaction when nothing needs migrating, so that opening an
// up-to-date database writes nothing.
var errSkip = errors.New("store: schema is current")

func corrupt(format string, args ...any) *protocol.Error {
	return protocol.Errorf(protocol.CodeCorruptState, format, args...)
}

// initSchema creates the meta bucket of a new database, checks that an existing one is airlock
// state of a schema this build knows, and applies the pending migrations: all in one Update,
// which is rolled back when there is nothing to write.
func initSchema(db *bolt.DB, path string, now time.Time) error {
	err := db.Update(func(tx *bolt.Tx) error {
		current, err := schemaOf(tx, path)
		if err != nil {
			return err
		}
		if current == 0 {
			meta, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return fmt.Errorf("create bucket meta: %w", err)
			}
			if err := meta.Put(keyFormat, []byte(formatName)); err != nil {
				return err
			}
			if err := meta.Put(keyCreatedAt, []byte(now.UTC().Format(time.RFC3339Nano))); err != nil {
				return err
			}
		}
		if current == latestSchema() {
			if err := requireBuckets(tx, path); err != nil {
				return err
			}
			return errSkip
		}
		if err := applyMigrations(tx, current); err != nil {
			return err
		}
		return requireBuckets(tx, path)
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// schemaOf returns the schema version recorded in tx, or 0 for a database with no buckets at
// all (new, or created by bbolt just before a crash: either way it holds nothing).
func schemaOf(tx *bolt.Tx, path string) (int, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		if k, _ := tx.Cursor().First(); k != nil {
			return 0, corrupt("%s is a bbolt database but not airlock state (no meta bucket); airlockd will not modify it", path)
		}
		return 0, nil
	}
	if f := meta.Get(keyFormat); string(f) != formatName {
		return 0, corrupt("%s is a bbolt database but not airlock state (meta/format is not %q); airlockd will not modify it", path, formatName)
	}
	raw := meta.Get(keySchemaVersion)
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 || strconv.Itoa(v) != string(raw) {
		return 0, corrupt("%s has an invalid meta/schemaVersion", path)
	}
	if v > latestSchema() {
		return 0, corrupt("%s was written by a newer airlock (schema %d; this build reads up to %d)", path, v, latestSchema())
	}
	return v, nil
}

// applyMigrations runs every migration newer than from, in order, and records the new version.
func applyMigrations(tx *bolt.Tx, from int) error {
	to := from
	for _, m := range migrations {
		if m.version <= from {
			continue
		}
		if err := m.migrate(tx); err != nil {
			return fmt.Errorf("store: migration to schema %d (%s): %w", m.version, m.name, err)
		}
		to = m.version
	}
	return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte(strconv.Itoa(to)))
}

// requireBuckets checks that the buckets of the current schema exist, so that later reads can
// rely on them.
func requireBuckets(tx *bolt.Tx, path string) error {
	for _, name := range [][]byte{bucketCatalog, bucketManifests, bucketRegistrations, bucketJournal, bucketRooms, bucketPublications, bucketCallFloors, bucketBusHosts} {
		if tx.Bucket(name) == nil {
			return corrupt("%s lacks the %s bucket of its schema", path, name)
		}
	}
	return nil
}
