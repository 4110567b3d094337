package store

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// migrationTests has one entry per migration, in the same order. init seeds data in the schema
// before the migration; check verifies the schema and the data after it.
var migrationTests = []struct {
	name  string
	init  func(*bolt.Tx) error
	check func(*bolt.Tx) error
}{
	{
		name: "v1 creates catalog and manifests",
		init: func(*bolt.Tx) error { return nil },
		check: func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bucketCatalog, bucketManifests} {
				if tx.Bucket(name) == nil {
					return fmt.Errorf("bucket %s missing", name)
				}
			}
			return nil
		},
	},
	{
		name: "v2 creates registrations and keeps sessions",
		init: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketCatalog).Put([]byte("s1"), []byte(`{"kept":true}`))
		},
		check: func(tx *bolt.Tx) error {
			if tx.Bucket(bucketRegistrations) == nil {
				return fmt.Errorf("bucket %s missing", bucketRegistrations)
			}
			if got := string(tx.Bucket(bucketCatalog).Get([]byte("s1"))); got != `{"kept":true}` {
				return fmt.Errorf("catalog/s1 = %q after the migration", got)
			}
			return nil
		},
	},
	{
		name: "v3 creates journal and keeps sessions and registrations",
		init: func(tx *bolt.Tx) error {
			if err := tx.Bucket(bucketCatalog).Put([]byte("s1"), []byte(`{"kept":true}`)); err != nil {
				return err
			}
			return tx.Bucket(bucketRegistrations).Put([]byte("a"), []byte(`{"kept":true}`))
		},
		check: func(tx *bolt.Tx) error {
			j := tx.Bucket(bucketJournal)
			if j == nil {
				return fmt.Errorf("bucket %s missing", bucketJournal)
			}
			if k, _ := j.Cursor().First(); k != nil {
				return fmt.Errorf("bucket %s is not empty", bucketJournal)
			}
			if got := string(tx.Bucket(bucketCatalog).Get([]byte("s1"))); got != `{"kept":true}` {
				return fmt.Errorf("catalog/s1 = %q after the migration", got)
			}
			if got := string(tx.Bucket(bucketRegistrations).Get([]byte("a"))); got != `{"kept":true}` {
				return fmt.Errorf("registrations/a = %q after the migration", got)
			}
			return nil
		},
	},
	{
		name: "v4 rewrites registrations as version 2 without digests",
		init: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRegistrations).Put([]byte("lamp"), []byte(`{"name":"lamp","command":"/usr/bin/python3","args":["light.py"]}`))
		},
		check: func(tx *bolt.Tx) error {
			got := string(tx.Bucket(bucketRegistrations).Get([]byte("lamp")))
			if want := `{"version":2,"name":"lamp","command":"/usr/bin/python3","args":["light.py"]}`; got != want {
				return fmt.Errorf("registrations/lamp = %s, want %s", got, want)
			}
			return nil
		},
	},
	{
		name: "v5 creates rooms and publications and keeps registrations",
		init: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRegistrations).Put([]byte("a"), []byte(`{"kept":true}`))
		},
		check: func(tx *bolt.Tx) error {
			for _, name := range [][]byte{bucketRooms, bucketPublications} {
				b := tx.Bucket(name)
				if b == nil {
					return fmt.Errorf("bucket %s missing", name)
				}
				if k, _ := b.Cursor().First(); k != nil {
					return fmt.Errorf("bucket %s is not empty", name)
				}
			}
			if got := string(tx.Bucket(bucketRegistrations).Get([]byte("a"))); got != `{"kept":true}` {
				return fmt.Errorf("registrations/a = %q after the migration", got)
			}
			return nil
		},
	},
	{
		name: "v6 creates callFloors and keeps rooms",
		init: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRooms).Put([]byte("home"), []byte(`{"kept":true}`))
		},
		check: func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketCallFloors)
			if b == nil {
				return fmt.Errorf("bucket %s missing", bucketCallFloors)
			}
			if k, _ := b.Cursor().First(); k != nil {
				return fmt.Errorf("bucket %s is not empty", bucketCallFloors)
			}
			if got := string(tx.Bucket(bucketRooms).Get([]byte("home"))); got != `{"kept":true}` {
				return fmt.Errorf("rooms/home = %q after the migration", got)
			}
			return nil
		},
	},
	{
		name: "v7 creates bus_hosts and keeps rooms",
		init: func(tx *bolt.Tx) error {
			return tx.Bucket(bucketRooms).Put([]byte("living"), []byte(`{"kept":true}`))
		},
		check: func(tx *bolt.Tx) error {
			if tx.Bucket(bucketBusHosts) == nil {
				return fmt.Errorf("bucket %s missing", bucketBusHosts)
			}
			if got := string(tx.Bucket(bucketRooms).Get([]byte("living"))); got != `{"kept":true}` {
				return fmt.Errorf("rooms/living = %q after the migration", got)
			}
			return nil
		},
	},
}

// A registration that is not a valid version 1 record fails the schema 4 migration, and the
// file stays at schema 3.
func TestMigrateRegistrationsRefusesCorrupt(t *testing.T) {
	for _, raw := range []string{`{"name":"lamp"`, `{"name":"other","command":"/x","args":[]}`, `{"name":"lamp","command":"/x","args":[],"env":{}}`} {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket(bucketRegistrations)
			if err != nil {
				return err
			}
			if err := b.Put([]byte("lamp"), []byte(raw)); err != nil {
				return err
			}
			return migrateRegistrationsV2(tx)
		})
		db.Close()
		if err == nil || !strings.Contains(err.Error(), "not a version 1 registration") {
			t.Fatalf("migrate %s: %v", raw, err)
		}
	}
}

// TestMigrations runs every migration on a database at the schema before it. It fails when a
// migration has no test, as containerd's metadata TestMigrations does.
func TestMigrations(t *testing.T) {
	if len(migrationTests) != len(migrations) {
		t.Fatalf("%d migrations but %d migration tests: add a migrationTests entry for each migration", len(migrations), len(migrationTests))
	}
	for i, m := range migrations {
		tc := migrationTests[i]
		t.Run(tc.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Update(func(tx *bolt.Tx) error {
				meta, err := tx.CreateBucket(bucketMeta)
				if err != nil {
					return err
				}
				if err := meta.Put(keyFormat, []byte(formatName)); err != nil {
					return err
				}
				for _, prev := range migrations[:i] {
					if err := prev.migrate(tx); err != nil {
						return err
					}
					if err := meta.Put(keySchemaVersion, []byte(strconv.Itoa(prev.version))); err != nil {
						return err
					}
				}
				return tc.init(tx)
			})
			if err != nil {
				t.Fatalf("setting up schema %d: %v", m.version-1, err)
			}
			if err := db.Update(m.migrate); err != nil {
				t.Fatalf("migration %d: %v", m.version, err)
			}
			if err := db.View(tc.check); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMigrationVersionsAreConsecutive(t *testing.T) {
	for i, m := range migrations {
		if m.version != i+1 {
			t.Errorf("migrations[%d].version = %d, want %d", i, m.version, i+1)
		}
		if m.name == "" || m.migrate == nil {
			t.Errorf("migrations[%d] needs a name and a func", i)
		}
	}
}
