package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// DefaultHeadEvery is how often airlockd exports the chain head while it changes.
const DefaultHeadEvery = 5 * time.Minute

// ExportHeads calls emit with the journal's head every interval when it moved since the last
// export, and once more when ctx is done (at shutdown), moved or not, then returns: each stop
// of the daemon leaves its last head in the log. The daemon passes a
// function that logs the head (journald and syslog keep the lines where a process with the
// operator's uid cannot rewrite them) and, when the operator asks, WriteHeadFile. The caller
// owns the goroutine that runs it; it stops with ctx.
func (j *Journal) ExportHeads(ctx context.Context, every time.Duration, emit func(Head)) {
	if every <= 0 {
		every = DefaultHeadEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last Head
	export := func(always bool) {
		if h := j.Head(); always || h.Seq != last.Seq || h.Digest != last.Digest {
			emit(h)
			last = h
		}
	}
	for {
		select {
		case <-ctx.Done():
			export(true)
			return
		case <-t.C:
			export(false)
		}
	}
}

// WriteHeadFile replaces path with h as one JSON object (written to a temporary file in the
// same directory, synced, then renamed), so that a reader never sees half of it. Point it at a
// place another machine or user collects from: a copy beside the journal protects nothing.
func WriteHeadFile(path string, h Head) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".audit-head-*")
	if err != nil {
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot write the audit head to %s", path), err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Chmod(fileMode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return protocol.Wrap(protocol.Errorf(CodeWriteFailed, "cannot write the audit head to %s", path), err)
	}
	return nil
}
