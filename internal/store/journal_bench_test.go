package store

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

// BenchmarkJournalAdmission measures durable admissions: AppendJournal of one wake with a
// 200-byte prompt into a real, fsynced database, from 1 and from 64 concurrent admitters
// (each its own session).
func BenchmarkJournalAdmission(b *testing.B) {
	for _, admitters := range []int{1, 64} {
		b.Run(fmt.Sprintf("admitters=%d", admitters), func(b *testing.B) {
			benchAdmission(b, admitters)
		})
	}
}

func benchAdmission(b *testing.B, admitters int) {
	s := openT(b, newDir(b))
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for a := range admitters {
		wg.Go(func() {
			id := fmt.Sprintf("session-%03d", a)
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				w := testWake(id, int(n))
				w.Prompt = benchPrompt(int(n))
				if _, err := s.AppendJournal(w); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "admissions/s")
	b.ReportMetric(float64(b.N)/float64(s.group.commits.Load()), "appends/commit")
}

// benchPrompt is a 200-byte prompt.
func benchPrompt(n int) string {
	p := fmt.Sprintf("wake %d: summarize the overnight CI failures and open an issue for each new one. ", n)
	return p + strings.Repeat("x", 200-len(p))
}

// BenchmarkJournalRecovery measures the startup read path, Open + Records + RecoverJournal, on
// a database of 4,096 sessions (catalog record and manifest each) and 10,000 journal entries:
// 80% completed with a result, 10% queued, 10% accepted (which recovery rewrites as
// indeterminate). Each iteration opens a fresh copy of the fixture, so each one rewrites the
// accepted entries.
func BenchmarkJournalRecovery(b *testing.B) {
	const sessions, entries = 4096, 10_000
	template := newDir(b)
	s := openT(b, template)
	buildRecoveryFixture(b, s, sessions, entries)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		b.Fatal(err)
	}

	var total, cpu time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := newDir(b)
		copyStateDir(b, template, dir)
		b.StartTimer()
		start, startCPU := time.Now(), cpuTime(b)
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		recs, err := s.Records()
		if err != nil || len(recs) != sessions {
			b.Fatalf("Records = %d, %v", len(recs), err)
		}
		got, err := s.RecoverJournal()
		if err != nil || len(got) != entries {
			b.Fatalf("RecoverJournal = %d, %v", len(got), err)
		}
		total += time.Since(start)
		cpu += cpuTime(b) - startCPU
		b.StopTimer()
		s.Close()
	}
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/recovery")
	// The process's CPU time, user and system, tells a slow recovery from a busy machine.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/recovery")
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}

// cpuTime is the CPU time, user and system, this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// buildRecoveryFixture writes the sessions and entries in one transaction, as SaveSession and
// AppendJournal would have written them one by one.
func buildRecoveryFixture(b *testing.B, s *Store, sessions, entries int) {
	b.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		catalog, manifests, journal := tx.Bucket(bucketCatalog), tx.Bucket(bucketManifests), tx.Bucket(bucketJournal)
		for i := range sessions {
			id := fmt.Sprintf("session-%04d", i)
			rec := testRecord(id)
			rec.FormatVersion, rec.Revision = protocol.CatalogFormatVersion, 1
			m := testManifest(id, 1)
			m.FormatVersion = ManifestFormatVersion
			for _, kv := range []struct {
				b *bolt.Bucket
				v any
			}{{catalog, &rec}, {manifests, m}} {
				data, err := json.Marshal(kv.v)
				if err != nil {
					return err
				}
				if err := kv.b.Put([]byte(id), data); err != nil {
					return err
				}
			}
		}
		result := json.RawMessage(`{"text":"the build is green again; two flaky tests were quarantined","turns":4}`)
		for n := range entries {
			id := fmt.Sprintf("session-%04d", n%sessions)
			sb, err := journal.CreateBucketIfNotExists([]byte(id))
			if err != nil {
				return err
			}
			seq, err := sb.NextSequence()
			if err != nil {
				return err
			}
			e := testWake(id, n)
			e.FormatVersion, e.Seq, e.Prompt = JournalFormatVersion, seq, benchPrompt(n)
			e.CreatedAt, e.UpdatedAt = t0, t0
			switch n % 10 {
			case 0:
			case 1:
				e.State = JournalAccepted
			default:
				e.State, e.Result = JournalCompleted, result
			}
			data, err := json.Marshal(&e)
			if err != nil {
				return err
			}
			if err := sb.Put(seqKey(seq), data); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// copyStateDir copies the database of the state directory src into a new state directory dst
// and syncs it.
func copyStateDir(b *testing.B, src, dst string) {
	b.Helper()
	if err := os.Mkdir(dst, 0o700); err != nil {
		b.Fatal(err)
	}
	in, err := os.Open(filepath.Join(src, DBName))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(filepath.Join(dst, DBName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		b.Fatal(err)
	}
	// A restarted daemon finds its database on disk, not dirty in the page cache: without this
	// the recovery's commit would pay for writing back the whole copy.
	if err := out.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
}
