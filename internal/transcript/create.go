package transcript

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// Create makes a new transcript in dir and returns it open for appending, its header written
// and durable. dir is created (0700, with missing parents) if needed, and must then be a real
// directory owned by the effective uid with no group or other bits (insecure_state_path
// otherwise). The file is "<UTC yyyymmddThhmmssZ of now>-<16 hex random>.jsonl", created 0600
// with O_EXCL and O_NOFOLLOW; the conversation id is that name without ".jsonl". A zero now
// means the current time.
//
// The header is written and made durable under a temporary name (a "." and the name, with
// ".tmp" after it), which is then renamed: a transcript's name exists only with its whole
// header. A crash inside Create leaves at most such a temporary file, which neither Latest nor
// Open considers; before, it left a transcript with an incomplete header, which Latest
// returned, so that every later open in mode continue failed corrupt_transcript until an
// operator removed it. If Create fails, it removes what it created.
func Create(dir string, now time.Time) (*File, error) {
	if dir == "" {
		return nil, insecure("transcript directory path is empty")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, protocol.Wrap(insecure("cannot resolve transcript directory %s", dir), err)
	}
	if err := os.MkdirAll(dir, dirMode); err != nil {
		return nil, protocol.Wrap(insecure("cannot create transcript directory %s", dir), err)
	}
	if err := checkDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// Removed between MkdirAll and Lstat.
			return nil, protocol.Wrap(insecure("transcript directory %s vanished", dir), err)
		}
		return nil, err
	}

	if now.IsZero() {
		now = time.Now()
	}
	var random [8]byte
	rand.Read(random[:]) // never fails (crypto/rand, Go 1.24)
	h := header{Kind: KindHeader, FormatVersion: FormatVersion, ConversationID: newID(now, random), CreatedAt: now.UTC()}
	line, err := encodeLine(&h)
	if err != nil {
		// Only a time outside years 0–9999 fails to encode.
		return nil, fmt.Errorf("create transcript: creation time %s cannot be encoded: %w", now.UTC().Format(time.RFC3339), err)
	}
	path := filepath.Join(dir, h.ConversationID+fileSuffix)
	tmp := filepath.Join(dir, "."+h.ConversationID+fileSuffix+".tmp")

	osf, err := os.OpenFile(tmp, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL|openNoFollow, fileMode)
	if err != nil {
		if isLoop(err) {
			return nil, insecure("transcript %s is a symbolic link", tmp)
		}
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	}
	created := tmp
	fail := func(err error) (*File, error) {
		osf.Close()
		os.Remove(created)
		return nil, fmt.Errorf("create transcript %s: %w", path, err)
	}
	if _, err := osf.Write(line); err != nil {
		return fail(err)
	}
	if err := fsync(osf); err != nil {
		return fail(err)
	}
	// The name is new (its random part): should something have taken it meanwhile, Create
	// fails rather than replace it. The check and the rename are not one step, but only the
	// directory's owner can create names here, and rename never follows a link.
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return fail(fmt.Errorf("%s exists", path))
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	created = path
	// The new name must survive a crash too, or the catalog could name a file that is gone.
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return &File{id: Identity{ID: h.ConversationID, File: path}, f: osf, size: int64(len(line))}, nil
}

// syncDir fsyncs a directory, making the creation of a name in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// Latest returns the path of the most recently created transcript in dir, by name order (the
// UTC timestamp prefix sorts; two transcripts created within the same second sort by their
// random part, so between those the choice is arbitrary). Only names of the form Create makes
// count; ok is false when there is none, including when dir does not exist. dir itself is
// checked as Create checks it; the file is not (Open does that).
func Latest(dir string) (path string, ok bool, err error) {
	if dir == "" {
		return "", false, insecure("transcript directory path is empty")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", false, protocol.Wrap(insecure("cannot resolve transcript directory %s", dir), err)
	}
	if err := checkDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	names, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return "", false, fmt.Errorf("list transcript directory %s: %w", dir, err)
	}
	for i := len(names) - 1; i >= 0; i-- {
		if namePattern.MatchString(names[i].Name()) {
			return filepath.Join(dir, names[i].Name()), true, nil
		}
	}
	return "", false, nil
}
