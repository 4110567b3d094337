package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/airlockhq/airlock/internal/protocol"
)

var t0 = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

// newDir returns a path for a state directory that does not exist yet, inside a private
// temporary directory.
func newDir(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	// os.MkdirTemp makes it 0700 already; be explicit, the tests depend on it.
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "state")
}

func openT(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testRecord(id string) protocol.CatalogRecord {
	pol := protocol.Policy{
		Cwd:   "/home/owner/project",
		Mode:  protocol.ModeNew,
		Tools: "none",
		Model: &protocol.ModelRef{Provider: "ollama", ID: "qwen3"},
	}
	return protocol.CatalogRecord{
		SessionID:       id,
		Name:            "name of " + id,
		Generation:      1,
		Residency:       protocol.Resident,
		State:           protocol.StateIdle,
		ProtocolVersion: "2.0",
		PolicyDigest:    pol.Digest(),
		Policy:          pol,
		CreatedAt:       t0,
		UpdatedAt:       t0,
		LastUsedAt:      t0,
		LastTerminal:    &protocol.LastTerminal{State: "succeeded", At: t0, RequestID: "r1"},
	}
}

func testManifest(id string, gen int64) *Manifest {
	rec := testRecord(id)
	return &Manifest{
		ProtocolVersion: "2.0",
		SessionID:       id,
		Generation:      gen,
		Policy:          rec.Policy,
		CreatedAt:       t0,
		UpdatedAt:       t0,
	}
}

func save(t testing.TB, s *Store, rec *protocol.CatalogRecord, m *Manifest) {
	t.Helper()
	if err := s.SaveSession(rec, m); err != nil {
		t.Fatalf("SaveSession(%q): %v", rec.SessionID, err)
	}
}

// wantCode fails unless err carries a *protocol.Error with code.
func wantCode(t testing.TB, err error, code string) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) has no *protocol.Error, want code %s", err, err, code)
	}
	if pe.Code != code {
		t.Fatalf("code = %s (%v), want %s", pe.Code, err, code)
	}
	return pe
}

// rawUpdate edits the database file directly, as another program or bit rot would.
func rawUpdate(t testing.TB, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func rawView(t testing.TB, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(fn); err != nil {
		t.Fatal(err)
	}
}

// lastTxID is the id of the last committed transaction of the file at path.
func lastTxID(t testing.TB, path string) int {
	var id int
	rawView(t, path, func(tx *bolt.Tx) error { id = tx.ID(); return nil })
	return id
}

func TestOpenCreatesPrivateState(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	if want := filepath.Join(dir, DBName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, s.Path(): 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
	rawView(t, s.Path(), func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		if meta == nil {
			t.Fatal("no meta bucket")
		}
		want := map[string]string{"format": "airlock-state", "schemaVersion": strconv.Itoa(latestSchema()), "createdAt": "2026-08-01T12:00:00Z"}
		for k, v := range want {
			if got := string(meta.Get([]byte(k))); got != v {
				t.Errorf("meta/%s = %q, want %q", k, got, v)
			}
		}
		if _, err := time.Parse(time.RFC3339, string(meta.Get([]byte("createdAt")))); err != nil {
			t.Errorf("createdAt is not RFC 3339: %v", err)
		}
		for _, b := range []string{"catalog", "manifests"} {
			if tx.Bucket([]byte(b)) == nil {
				t.Errorf("no %s bucket", b)
			}
		}
		return nil
	})
}

func TestReopenPersists(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	a, b := testRecord("a"), testRecord("b")
	b.Recovery = &protocol.RecoveryCondition{State: "reprovision_required", Code: "credentials_required", Retryable: true}
	ma := testManifest("a", 1)
	save(t, s, &a, ma)
	save(t, s, &b, nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openT(t, dir)
	got, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	if want := []protocol.CatalogRecord{a, b}; !reflect.DeepEqual(got, want) {
		t.Errorf("Records() after reopen = %+v, want %+v", got, want)
	}
	gotM, err := s.Manifest("a")
	if err != nil || !reflect.DeepEqual(gotM, ma) {
		t.Errorf("Manifest(a) = %+v, %v, want %+v", gotM, err, ma)
	}
	if m, err := s.Manifest("b"); m != nil || err != nil {
		t.Errorf("Manifest(b) = %+v, %v, want nil, nil", m, err)
	}
	if r, err := s.Record("missing"); r != nil || err != nil {
		t.Errorf("Record(missing) = %+v, %v, want nil, nil", r, err)
	}
}

// An up-to-date database opens without a commit: the schema Update rolls back (errSkip).
func TestOpenCurrentSchemaDoesNotCommit(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	s.Close()
	before := lastTxID(t, s.Path())
	s = openT(t, dir)
	s.Close()
	if after := lastTxID(t, s.Path()); after != before {
		t.Errorf("reopening committed: txid %d -> %d", before, after)
	}
}

// A bbolt file without any bucket holds nothing, so it is initialized; this also covers a crash
// between bbolt creating the file and the first commit.
func TestOpenInitializesEmptyFile(t *testing.T) {
	for name, create := range map[string]func(path string) error{
		"zero bytes": func(path string) error { return os.WriteFile(path, nil, 0o600) },
		"bbolt without buckets": func(path string) error {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				return err
			}
			return db.Close()
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := newDir(t)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := create(filepath.Join(dir, DBName)); err != nil {
				t.Fatal(err)
			}
			s := openT(t, dir)
			rec := testRecord("x")
			save(t, s, &rec, nil)
		})
	}
}

func TestSaveSessionBumpsRevision(t *testing.T) {
	s := openT(t, newDir(t))
	rec := testRecord("s")
	rec.FormatVersion = 7 // overwritten
	rec.Revision = 41     // ignored: the stored revision decides
	for want := uint64(1); want <= 3; want++ {
		save(t, s, &rec, nil)
		if rec.Revision != want || rec.FormatVersion != protocol.CatalogFormatVersion {
			t.Fatalf("after save %d: revision %d formatVersion %d", want, rec.Revision, rec.FormatVersion)
		}
		got, err := s.Record("s")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, rec) {
			t.Fatalf("Record = %+v, want %+v", got, rec)
		}
		rec.Revision = 0 // the caller's value never matters
	}
}

// A refused save changes neither the stored state nor the caller's record.
func TestSaveSessionRefusedWritesNothing(t *testing.T) {
	s := openT(t, newDir(t))
	rec := testRecord("s")
	m1 := testManifest("s", 1)
	save(t, s, &rec, m1)

	cases := []struct {
		name string
		rec  func() *protocol.CatalogRecord
		m    *Manifest
		code string
	}{
		{"record too large", func() *protocol.CatalogRecord {
			r := rec
			r.Name = strings.Repeat("x", MaxRecordBytes)
			return &r
		}, testManifest("s", 2), protocol.CodeCatalogUpdate},
		{"manifest too large", func() *protocol.CatalogRecord { r := rec; return &r }, func() *Manifest {
			m := testManifest("s", 2)
			m.Policy.SystemPrompt = strings.Repeat("y", MaxRecordBytes)
			return m
		}(), protocol.CodeCatalogUpdate},
		{"manifest of another session", func() *protocol.CatalogRecord { r := rec; return &r }, testManifest("other", 2), protocol.CodeCatalogUpdate},
		{"empty session id", func() *protocol.CatalogRecord { r := rec; r.SessionID = ""; return &r }, nil, protocol.CodeCatalogUpdate},
		{"session id too long", func() *protocol.CatalogRecord {
			r := rec
			r.SessionID = strings.Repeat("é", protocol.MaxSessionIDLen+1)
			return &r
		}, nil, protocol.CodeCatalogUpdate},
		{"session id not UTF-8", func() *protocol.CatalogRecord { r := rec; r.SessionID = "a\xff"; return &r }, nil, protocol.CodeCatalogUpdate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rec()
			orig := *r
			wantCode(t, s.SaveSession(r, tc.m), tc.code)
			if !reflect.DeepEqual(*r, orig) {
				t.Errorf("refused save changed the caller's record")
			}
			got, err := s.Record("s")
			if err != nil || got.Revision != 1 || got.Name != rec.Name {
				t.Errorf("stored record changed: %+v, %v", got, err)
			}
			if m, err := s.Manifest("s"); err != nil || !reflect.DeepEqual(m, m1) {
				t.Errorf("stored manifest changed: %+v, %v", m, err)
			}
		})
	}
	if err := s.SaveSession(nil, nil); err == nil {
		t.Error("SaveSession(nil) succeeded")
	}
}

func TestSaveSessionManifestSameTransaction(t *testing.T) {
	s := openT(t, newDir(t))
	rec := testRecord("s")
	m := testManifest("s", 1)
	save(t, s, &rec, m)
	if m.FormatVersion != ManifestFormatVersion {
		t.Errorf("manifest formatVersion = %d, want %d", m.FormatVersion, ManifestFormatVersion)
	}
	got, err := s.Manifest("s")
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("Manifest = %+v, %v, want %+v", got, err, m)
	}

	// A new generation replaces the manifest with the record.
	rec.Generation = 2
	m2 := testManifest("s", 2)
	save(t, s, &rec, m2)
	if got, _ := s.Manifest("s"); got == nil || got.Generation != 2 {
		t.Fatalf("Manifest after generation 2 = %+v", got)
	}

	// A retained close: record dormant, manifest gone, in the same commit.
	rec.Residency = protocol.Dormant
	save(t, s, &rec, nil)
	if got, err := s.Manifest("s"); got != nil || err != nil {
		t.Errorf("Manifest after nil save = %+v, %v, want nil, nil", got, err)
	}
	if r, _ := s.Record("s"); r.Revision != 3 || r.Residency != protocol.Dormant {
		t.Errorf("record after nil save = %+v", r)
	}

	// Both writes are in one transaction: one commit per SaveSession.
	s.Close()
	path := s.Path()
	before := lastTxID(t, path)
	s = openT(t, filepath.Dir(path))
	rec.Residency = protocol.Resident
	save(t, s, &rec, m2)
	s.Close()
	if after := lastTxID(t, path); after != before+1 {
		t.Errorf("SaveSession with a manifest took %d commits, want 1", after-before)
	}
}

func TestPage(t *testing.T) {
	s := openT(t, newDir(t))
	var ids []string
	// Save in an order unlike sessionId order; the catalog lists by key.
	for i := range 250 {
		id := fmt.Sprintf("session-%03d", (i*7)%250)
		ids = append(ids, id)
		rec := testRecord(id)
		save(t, s, &rec, nil)
	}
	slices.Sort(ids)

	var got []string
	cursor := ""
	var sizes []int
	for page := 0; ; page++ {
		if page > 3 {
			t.Fatal("more than 3 pages")
		}
		recs, next, err := s.Page(cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(recs))
		for _, r := range recs {
			got = append(got, r.SessionID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Equal(sizes, []int{100, 100, 50}) {
		t.Errorf("page sizes = %v, want [100 100 50]", sizes)
	}
	if !slices.Equal(got, ids) {
		t.Errorf("pages do not list every session once in sessionId order")
	}
	all, err := s.Records()
	if err != nil || len(all) != 250 {
		t.Fatalf("Records() = %d records, %v", len(all), err)
	}

	// A page ending exactly at the last record says there is no next page.
	recs, next, err := s.Page("", 250)
	if err != nil || len(recs) != 250 || next != "" {
		t.Errorf("Page(\"\", 250) = %d records, next %q, %v", len(recs), next, err)
	}

	// A cursor stays valid when its record is deleted, and the order is stable.
	first, next, err := s.Page("", 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteSession(first[99].SessionID); err != nil {
		t.Fatal(err)
	}
	recs, _, err = s.Page(next, 1)
	if err != nil || len(recs) != 1 || recs[0].SessionID != ids[100] {
		t.Errorf("page after a deleted cursor record = %+v, %v, want %s", recs, err, ids[100])
	}

	// An empty catalog has one empty page.
	empty := openT(t, newDir(t))
	if recs, next, err := empty.Page("", 10); err != nil || len(recs) != 0 || next != "" {
		t.Errorf("empty Page = %v, %q, %v", recs, next, err)
	}
}

func TestPageRefusesBadCursor(t *testing.T) {
	s := openT(t, newDir(t))
	for _, cursor := range []string{"!!!", "c2Vzc2lvbi0wMDE=", "a", "=", "c2Vzc2lvbi0wMDE\n"} {
		_, _, err := s.Page(cursor, 10)
		pe := wantCode(t, err, protocol.CodeInvalidField)
		if pe.Details["field"] != "payload.cursor" {
			t.Errorf("cursor %q: details %v, want field payload.cursor", cursor, pe.Details)
		}
	}
	_, _, err := s.Page("", 0)
	if pe := wantCode(t, err, protocol.CodeInvalidField); pe.Details["field"] != "payload.limit" {
		t.Errorf("limit 0: details %v", pe.Details)
	}
}

func TestDeleteSession(t *testing.T) {
	s := openT(t, newDir(t))
	a, b := testRecord("a"), testRecord("b")
	save(t, s, &a, testManifest("a", 1))
	save(t, s, &b, nil)

	existed, err := s.DeleteSession("a")
	if err != nil || !existed {
		t.Fatalf("DeleteSession(a) = %v, %v, want true", existed, err)
	}
	if r, err := s.Record("a"); r != nil || err != nil {
		t.Errorf("Record(a) after delete = %+v, %v", r, err)
	}
	if m, err := s.Manifest("a"); m != nil || err != nil {
		t.Errorf("Manifest(a) after delete = %+v, %v", m, err)
	}
	if existed, err := s.DeleteSession("a"); existed || err != nil {
		t.Errorf("second DeleteSession(a) = %v, %v, want false, nil", existed, err)
	}
	if recs, err := s.Records(); err != nil || len(recs) != 1 || recs[0].SessionID != "b" {
		t.Errorf("Records() after delete = %+v, %v", recs, err)
	}
	// A re-created session starts again at revision 1.
	a = testRecord("a")
	save(t, s, &a, nil)
	if a.Revision != 1 {
		t.Errorf("revision of re-created session = %d, want 1", a.Revision)
	}
}

func TestMarkAllDormant(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		rec := testRecord(id)
		if id == "b" {
			rec.Residency = protocol.Dormant
		}
		if id == "c" {
			rec.State = protocol.StateRunning
		}
		save(t, s, &rec, nil)
		save(t, s, &rec, nil) // revision 2
	}
	later := t0.Add(time.Hour)
	s.now = func() time.Time { return later }

	got, err := s.MarkAllDormant()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("MarkAllDormant returned %d records, want 3", len(got))
	}
	for _, r := range got {
		if r.Residency != protocol.Dormant {
			t.Errorf("%s: residency %s", r.SessionID, r.Residency)
		}
		wasResident := r.SessionID != "b"
		switch {
		case wasResident && (r.Revision != 3 || !r.UpdatedAt.Equal(later) || r.State != protocol.StateIdle):
			t.Errorf("%s: revision %d updatedAt %v state %s, want 3, %v, idle", r.SessionID, r.Revision, r.UpdatedAt, r.State, later)
		case !wasResident && (r.Revision != 2 || !r.UpdatedAt.Equal(t0)):
			t.Errorf("%s was dormant but changed: revision %d updatedAt %v", r.SessionID, r.Revision, r.UpdatedAt)
		}
	}
	stored, err := s.Records()
	if err != nil || !reflect.DeepEqual(stored, got) {
		t.Errorf("stored records differ from the returned ones: %v", err)
	}

	// Nothing resident: nothing written.
	s.Close()
	before := lastTxID(t, s.Path())
	s = openT(t, dir)
	again, err := s.MarkAllDormant()
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Errorf("second MarkAllDormant = %v, %v", again, err)
	}
	s.Close()
	if after := lastTxID(t, s.Path()); after != before {
		t.Errorf("MarkAllDormant with nothing resident committed")
	}
}

// The catalog_full test fills the catalog in one raw transaction; 4096 SaveSession calls would
// be 4096 fsyncs.
func TestCatalogFull(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCatalog)
		for i := range MaxRecords {
			rec := testRecord(fmt.Sprintf("s%05d", i))
			rec.FormatVersion = protocol.CatalogFormatVersion
			rec.Revision = 1
			data, err := json.Marshal(&rec)
			if err != nil {
				return err
			}
			if err := b.Put([]byte(rec.SessionID), data); err != nil {
				return err
			}
		}
		return nil
	})
	s = openT(t, dir)
	rec := testRecord("new")
	pe := wantCode(t, s.SaveSession(&rec, nil), CodeCatalogFull)
	if pe.Retryable {
		t.Error("catalog_full is retryable")
	}
	// An existing session can still be updated, and deleting one makes room.
	old := testRecord("s00000")
	save(t, s, &old, nil)
	if old.Revision != 2 {
		t.Errorf("revision = %d, want 2", old.Revision)
	}
	if recs, err := s.Records(); err != nil || len(recs) != MaxRecords {
		t.Errorf("Records() = %d, %v", len(recs), err)
	}
	if _, err := s.DeleteSession("s00001"); err != nil {
		t.Fatal(err)
	}
	save(t, s, &rec, nil)
}

func TestRecordsRefusesOversizedCatalog(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	s.Close()
	rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCatalog)
		for i := range MaxRecords + 1 {
			rec := testRecord(fmt.Sprintf("s%05d", i))
			rec.FormatVersion = protocol.CatalogFormatVersion
			data, _ := json.Marshal(&rec)
			if err := b.Put([]byte(rec.SessionID), data); err != nil {
				return err
			}
		}
		return nil
	})
	s = openT(t, dir)
	_, err := s.Records()
	wantCode(t, err, protocol.CodeCorruptState)
}

func TestInsecureStateDir(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"mode 0755", func(t *testing.T, dir string) { mkdir(t, dir, 0o755) }, "mode"},
		{"mode 0701", func(t *testing.T, dir string) { mkdir(t, dir, 0o701) }, "mode"},
		{"mode 0720", func(t *testing.T, dir string) { mkdir(t, dir, 0o720) }, "mode"},
		{"symlink to a private dir", func(t *testing.T, dir string) {
			real := dir + ".real"
			mkdir(t, real, 0o700)
			if err := os.Symlink(real, dir); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"regular file", func(t *testing.T, dir string) {
			if err := os.WriteFile(dir, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"owned by uid 65534", func(t *testing.T, dir string) {
			if os.Geteuid() != 0 {
				t.Skip("chown to another uid needs root")
			}
			mkdir(t, dir, 0o700)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			tc.setup(t, dir)
			_, err := Open(dir, Options{})
			pe := wantCode(t, err, protocol.CodeInsecureStatePath)
			if !strings.Contains(pe.Message, dir) || !strings.Contains(pe.Message, tc.want) {
				t.Errorf("message %q should name %s and say %q", pe.Message, dir, tc.want)
			}
			if _, err := os.Lstat(filepath.Join(dir, DBName)); err == nil {
				t.Errorf("a database file was created in the refused directory (%v)", err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func TestInsecureDBFile(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"mode 0644", func(t *testing.T, path string) { chmod(t, path, 0o644) }, "mode"},
		{"mode 0660", func(t *testing.T, path string) { chmod(t, path, 0o660) }, "mode"},
		{"mode 0604", func(t *testing.T, path string) { chmod(t, path, 0o604) }, "mode"},
		{"symlink to a private database", func(t *testing.T, path string) {
			real := filepath.Join(filepath.Dir(path), "real.db")
			if err := os.Rename(path, real); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(real, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			mkdir(t, path, 0o700)
		}, "not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
		{"owned by uid 65534", func(t *testing.T, path string) {
			if os.Geteuid() != 0 {
				t.Skip("chown to another uid needs root")
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			s := openT(t, dir)
			rec := testRecord("kept")
			save(t, s, &rec, nil)
			s.Close()
			tc.setup(t, s.Path())
			_, err := Open(dir, Options{})
			pe := wantCode(t, err, protocol.CodeInsecureStatePath)
			if !strings.Contains(pe.Message, s.Path()) || !strings.Contains(pe.Message, tc.want) {
				t.Errorf("message %q should name %s and say %q", pe.Message, s.Path(), tc.want)
			}
		})
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// Files Open must refuse with corrupt_state, leaving them byte for byte as they were.
func TestCorruptStateFile(t *testing.T) {
	garbage := func(n int) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(i*131 + i/7 + 3)
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(size int64) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			writeSampleDB(t, path)
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"100 bytes of garbage", garbage(100), "not a readable bbolt database"},
		{"64 KiB of garbage", garbage(64 << 10), "not a readable bbolt database"},
		{"truncated to 1000 bytes", truncate(1000), ""},
		{"truncated to two pages", truncate(8192), ""},
		{"truncated by one page in use", func(t *testing.T, path string) {
			writeSampleDB(t, path)
			var size int64
			rawView(t, path, func(tx *bolt.Tx) error { size = tx.Size(); return nil })
			if err := os.Truncate(path, size-4096); err != nil {
				t.Fatal(err)
			}
		}, "truncated"},
		{"foreign bbolt file", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				_, err := tx.CreateBucket([]byte("other"))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}, "not airlock state"},
		{"meta with another format", func(t *testing.T, path string) {
			writeSampleDB(t, path)
			rawUpdate(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(keyFormat, []byte("something-else"))
			})
		}, "not airlock state"},
		{"newer schemaVersion", func(t *testing.T, path string) {
			writeSampleDB(t, path)
			rawUpdate(t, path, func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte(strconv.Itoa(latestSchema()+1)))
			})
		}, "written by a newer airlock"},
		{"schemaVersion not decimal", setSchemaVersion("one"), "invalid meta/schemaVersion"},
		{"schemaVersion zero", setSchemaVersion("0"), "invalid meta/schemaVersion"},
		{"schemaVersion not canonical", setSchemaVersion("01"), "invalid meta/schemaVersion"},
		{"schemaVersion missing", func(t *testing.T, path string) {
			writeSampleDB(t, path)
			rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keySchemaVersion) })
		}, "invalid meta/schemaVersion"},
		{"catalog bucket missing", func(t *testing.T, path string) {
			writeSampleDB(t, path)
			rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketCatalog) })
		}, "lacks the catalog bucket"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			mkdir(t, dir, 0o700)
			path := filepath.Join(dir, DBName)
			tc.setup(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Open(dir, Options{LockTimeout: 50 * time.Millisecond})
			pe := wantCode(t, err, protocol.CodeCorruptState)
			if !strings.Contains(pe.Message, path) || !strings.Contains(pe.Message, tc.want) {
				t.Errorf("message %q should name %s and say %q", pe.Message, path, tc.want)
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Error("Open modified a file it refused")
			}
			// The refused file is not left locked.
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 50 * time.Millisecond, ReadOnly: true})
			if errors.Is(err, berrors.ErrTimeout) {
				t.Error("the refused file is still locked")
			}
			if db != nil {
				db.Close()
			}
		})
	}
}

func setSchemaVersion(v string) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		writeSampleDB(t, path)
		rawUpdate(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchemaVersion, []byte(v)) })
	}
}

// writeSampleDB writes a valid state database with some sessions at path.
func writeSampleDB(t *testing.T, path string) {
	t.Helper()
	s, err := Open(filepath.Dir(path), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 40 {
		rec := testRecord(fmt.Sprintf("sample-%02d", i))
		rec.Policy.SystemPrompt = strings.Repeat("p", 2000)
		if err := s.SaveSession(&rec, testManifest(rec.SessionID, 1)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStateLocked(t *testing.T) {
	dir := newDir(t)
	first := openT(t, dir)
	start := time.Now()
	_, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond})
	elapsed := time.Since(start)
	pe := wantCode(t, err, CodeStateLocked)
	if pe.Retryable {
		t.Error("state_locked is retryable")
	}
	if !strings.Contains(pe.Message, "in use by another airlockd") || !strings.Contains(pe.Message, dir) {
		t.Errorf("message %q", pe.Message)
	}
	if elapsed > 2*time.Second {
		t.Errorf("Open waited %v with a 50ms LockTimeout", elapsed)
	}
	// The first store still works, and once it is closed the directory can be opened again.
	rec := testRecord("s")
	save(t, first, &rec, nil)
	first.Close()
	second := openT(t, dir)
	if r, err := second.Record("s"); err != nil || r == nil {
		t.Errorf("Record after reopen = %v, %v", r, err)
	}
}

// Stored values that fail strict decoding are corrupt_state errors naming the session, from
// every read, and are never overwritten.
func TestCorruptRecord(t *testing.T) {
	valid := func() map[string]any {
		rec := testRecord("bad")
		rec.FormatVersion = protocol.CatalogFormatVersion
		rec.Revision = 1
		data, _ := json.Marshal(&rec)
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	edit := func(f func(m map[string]any)) []byte {
		m := valid()
		f(m)
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	cases := []struct {
		name string
		raw  []byte
		want string
	}{
		{"not JSON", []byte("\x00\x01SENTINEL-VALUE"), "does not decode"},
		{"truncated JSON", edit(func(map[string]any) {})[:40], "does not decode"},
		{"unknown field", edit(func(m map[string]any) { m["extra"] = "SENTINEL-VALUE" }), "does not decode"},
		{"case variant key", edit(func(m map[string]any) { m["SessionID"] = m["sessionId"]; delete(m, "sessionId") }), "does not decode"},
		{"duplicate key", []byte(`{"sessionId":"bad","sessionId":"bad"}`), "does not decode"},
		{"bad timestamp", edit(func(m map[string]any) { m["createdAt"] = "SENTINEL-VALUE" }), "does not decode"},
		{"null member", edit(func(m map[string]any) { m["policy"] = nil }), "does not decode"},
		{"key differs from sessionId", edit(func(m map[string]any) { m["sessionId"] = "other" }), "names another session"},
		{"unknown formatVersion", edit(func(m map[string]any) { m["formatVersion"] = 2 }), "unknown formatVersion 2"},
		{"formatVersion zero", edit(func(m map[string]any) { m["formatVersion"] = 0 }), "unknown formatVersion 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			s := openT(t, dir)
			good := testRecord("good")
			save(t, s, &good, nil)
			s.Close()
			rawUpdate(t, s.Path(), func(tx *bolt.Tx) error { return tx.Bucket(bucketCatalog).Put([]byte("bad"), tc.raw) })
			s = openT(t, dir)

			check := func(op string, err error) {
				t.Helper()
				pe := wantCode(t, err, protocol.CodeCorruptState)
				if !strings.Contains(pe.Message, `"bad"`) || !strings.Contains(pe.Message, tc.want) {
					t.Errorf("%s: message %q should name session \"bad\" and say %q", op, pe.Message, tc.want)
				}
				if strings.Contains(err.Error(), "SENTINEL") {
					t.Errorf("%s: error %q quotes the stored record", op, err)
				}
			}
			_, err := s.Records()
			check("Records", err)
			_, err = s.Record("bad")
			check("Record", err)
			_, _, err = s.Page("", 10)
			check("Page", err)
			_, err = s.MarkAllDormant()
			check("MarkAllDormant", err)
			rec := testRecord("bad")
			check("SaveSession", s.SaveSession(&rec, nil))

			if r, err := s.Record("good"); err != nil || r == nil || r.Residency != protocol.Resident {
				t.Errorf("the good record was affected: %+v, %v", r, err)
			}
			s.Close()
			rawView(t, s.Path(), func(tx *bolt.Tx) error {
				if got := tx.Bucket(bucketCatalog).Get([]byte("bad")); !bytes.Equal(got, tc.raw) {
					t.Error("the corrupt record was overwritten")
				}
				return nil
			})
		})
	}
}

func TestCorruptManifest(t *testing.T) {
	cases := map[string]string{
		"garbage":               "\xffSENTINEL",
		"unknown field":         `{"formatVersion":1,"protocolVersion":"2.0","sessionId":"s","generation":1,"policy":{"cwd":"/","mode":"new","tools":"none"},"createdAt":"2026-08-01T12:00:00Z","updatedAt":"2026-08-01T12:00:00Z","handle":"SENTINEL"}`,
		"other session":         `{"formatVersion":1,"protocolVersion":"2.0","sessionId":"t","generation":1,"policy":{"cwd":"/","mode":"new","tools":"none"},"createdAt":"2026-08-01T12:00:00Z","updatedAt":"2026-08-01T12:00:00Z"}`,
		"unknown formatVersion": `{"formatVersion":9,"protocolVersion":"2.0","sessionId":"s","generation":1,"policy":{"cwd":"/","mode":"new","tools":"none"},"createdAt":"2026-08-01T12:00:00Z","updatedAt":"2026-08-01T12:00:00Z"}`,
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			dir := newDir(t)
			s := openT(t, dir)
			s.Close()
			rawUpdate(t, s.Path(), func(tx *bolt.Tx) error { return tx.Bucket(bucketManifests).Put([]byte("s"), []byte(raw)) })
			s = openT(t, dir)
			_, err := s.Manifest("s")
			pe := wantCode(t, err, protocol.CodeCorruptState)
			if !strings.Contains(pe.Message, `"s"`) || strings.Contains(err.Error(), "SENTINEL") {
				t.Errorf("error %q", err)
			}
		})
	}
}

func TestCloseIdempotent(t *testing.T) {
	s := openT(t, newDir(t))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Errorf("Close after Close: %v", err)
	}
	if _, err := s.Records(); err == nil {
		t.Error("Records after Close succeeded")
	}
	rec := testRecord("s")
	if err := s.SaveSession(&rec, nil); err == nil {
		t.Error("SaveSession after Close succeeded")
	}
}

func TestConcurrentSaves(t *testing.T) {
	s := openT(t, newDir(t))
	const workers, each = 8, 10
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[uint64]bool{}
	)
	for w := range workers {
		wg.Go(func() {
			for range each {
				rec := testRecord("shared")
				if err := s.SaveSession(&rec, testManifest("shared", int64(w))); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[rec.Revision] {
					t.Errorf("revision %d handed out twice", rec.Revision)
				}
				seen[rec.Revision] = true
				mu.Unlock()
				if _, err := s.Records(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if r, err := s.Record("shared"); err != nil || r.Revision != workers*each {
		t.Errorf("final revision = %+v, %v, want %d", r, err, workers*each)
	}
}

// Errors keep their code through wrapping, and Error() shows the cause for the log.
func TestErrorWrapping(t *testing.T) {
	cause := errors.New("disk on fire")
	err := fmt.Errorf("daemon: %w", protocol.Wrap(protocol.Errorf(protocol.CodeCatalogUpdate, "cannot save"), cause))
	if !errors.Is(err, cause) || !errors.Is(err, &protocol.Error{Code: protocol.CodeCatalogUpdate}) {
		t.Errorf("errors.Is lost the class or the cause: %v", err)
	}
	if pe := protocol.AsError(err); pe.Code != protocol.CodeCatalogUpdate || strings.Contains(pe.Message, "fire") {
		t.Errorf("AsError = %+v: the client message must not carry the cause", pe)
	}
	if !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Error() = %q lacks the cause", err)
	}
}

func BenchmarkSaveSession(b *testing.B) {
	s := openT(b, newDir(b))
	rec := testRecord("bench")
	m := testManifest("bench", 1)
	b.ReportAllocs()
	for b.Loop() {
		if err := s.SaveSession(&rec, m); err != nil {
			b.Fatal(err)
		}
	}
}

// TestOpenRefusesAnEmptyFileBesideEarlierState: a database of zero bytes beside anything else
// in the state directory (sessions, the audit journal, keys) was truncated, not left by a first
// start: corrupt_state, and the file is left as it is.
func TestOpenRefusesAnEmptyFileBesideEarlierState(t *testing.T) {
	dir := newDir(t)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "audit"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, DBName)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if e := protocol.AsError(err); e.Code != protocol.CodeCorruptState || !strings.Contains(e.Message, "holds a daemon's earlier state (audit)") {
		t.Fatalf("Open: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the empty file was changed: %v %v", fi, err)
	}
}
