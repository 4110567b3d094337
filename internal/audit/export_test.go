package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// exportEveryMinute runs j.ExportHeads every minute on a goroutine of the caller's bubble:
// got holds what it exported (read it after synctest.Wait), and stop ends it, as a shutdown.
func exportEveryMinute(j *Journal) (got *[]Head, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	got = new([]Head)
	done := make(chan struct{})
	go func() {
		j.ExportHeads(ctx, time.Minute, func(h Head) { *got = append(*got, h) })
		close(done)
	}()
	return got, func() { cancel(); <-done }
}

func TestExportHeadsEveryIntervalAndAtShutdown(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	synctest.Test(t, func(t *testing.T) {
		got, stop := exportEveryMinute(j)
		time.Sleep(time.Minute) // the first tick exports the head of the new journal
		synctest.Wait()
		if len(*got) != 1 || (*got)[0].Seq != 1 {
			t.Fatalf("after one tick: %+v", *got)
		}
		time.Sleep(time.Minute) // no append: nothing exported again
		synctest.Wait()
		if len(*got) != 1 {
			t.Fatalf("an unchanged head was exported again: %+v", *got)
		}
		write(t, j, "s", "a")
		stop() // shutdown exports the newest head at once
		if len(*got) != 2 || (*got)[1] != j.Head() {
			t.Fatalf("at shutdown: %+v, head %+v", *got, j.Head())
		}
	})
}

// TestExportHeadsAtShutdownUnmoved: the head is exported at shutdown though it has not moved
// since the last export, so that every stop leaves its last head in the log.
func TestExportHeadsAtShutdownUnmoved(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	synctest.Test(t, func(t *testing.T) {
		got, stop := exportEveryMinute(j)
		time.Sleep(time.Minute)
		synctest.Wait()
		stop()
		if len(*got) != 2 || (*got)[0] != (*got)[1] || (*got)[1] != j.Head() {
			t.Fatalf("exported %+v, head %+v", *got, j.Head())
		}
	})
}

func TestWriteHeadFile(t *testing.T) {
	dir := newDir(t)
	j := openJ(t, dir, Options{})
	write(t, j, "s", "a")
	path := filepath.Join(t.TempDir(), "head.json")
	if err := WriteHeadFile(path, j.Head()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var h Head
	if err := json.Unmarshal(b, &h); err != nil || h.Seq != 3 || h.Digest != j.Head().Digest {
		t.Fatalf("head file %s: %v", b, err)
	}
	a, _ := ParseAnchor(h.String())
	if rep, _ := Verify(dir, &a); !rep.OK() || !rep.Anchor.Holds {
		t.Fatalf("the exported head does not verify: %+v", rep)
	}
	if err := WriteHeadFile(filepath.Join(t.TempDir(), "missing", "head.json"), h); err == nil {
		t.Fatal("wrote into a missing directory")
	}
}
