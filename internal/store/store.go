package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/airlockhq/airlock/internal/protocol"
)

// DBName is the name of the database file inside the state directory.
const DBName = "airlock.db"

// DefaultLockTimeout is how long Open waits for the flock of a database that another process
// holds. A second airlockd on the same state directory should fail promptly with a diagnosis;
// one second still covers a previous airlockd that is just closing its database.
const DefaultLockTimeout = time.Second

// Options tune Open. The zero value is ready to use.
type Options struct {
	// LockTimeout bounds the wait for the database's flock; zero or negative means
	// DefaultLockTimeout. bbolt itself would wait forever.
	LockTimeout time.Duration
	// Now is the clock for createdAt and for MarkAllDormant; nil means time.Now.
	Now func() time.Time
}

// Store is an open state database. Its methods are safe for concurrent use.
type Store struct {
	db   *bolt.DB
	path string
	now  func() time.Time

	group groupCommit // journal writes; see groupcommit.go

	closeOnce sync.Once
	closeErr  error
}

// Open opens the state database in dir, creating dir (0700) and the database (0600) when they
// do not exist, and brings its schema up to date.
//
// It fails with a *protocol.Error found by errors.As: insecure_state_path when dir or the file
// is a symbolic link, is owned by another uid or grants any permission to group or others;
// corrupt_state when the file is not a bbolt database, is truncated or inconsistent, is a bbolt
// database that is not airlock state, or was written by a newer airlock; state_locked when
// another process holds it for longer than opts.LockTimeout. Open never resets or overwrites a
// file it refuses.
//
// Open reads every page of an existing database once (bbolt's consistency check), so that a
// damaged file is refused at startup rather than failing, or crashing, a later request.
func Open(dir string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := prepareStateDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, DBName)
	if err := checkDBFile(path); err != nil {
		return nil, err
	}
	if err := checkEmptyDB(dir, path); err != nil {
		return nil, err
	}
	db, err := openBolt(dir, path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	if err := initSchema(db, path, opts.Now().UTC()); err != nil {
		db.Close()
		return nil, err
	}
	clock := opts.Now
	return &Store{db: db, path: path, now: func() time.Time { return clock().UTC() }}, nil
}

// openBolt opens and checks the bbolt file at path.
//
// bbolt reads the file through a memory mapping, and a file truncated below the size its meta
// page claims faults (SIGBUS) on the first access past its end, which would kill the daemon.
// SetPanicOnFault turns that fault into a panic on this goroutine, which is reported as
// corrupt_state; so is any other panic of bbolt while it reads the file (an invalid freelist
// page, say). When bbolt.Open itself panicked, the mapping it made is leaked (the daemon is about
// to exit anyway) but the flock is released, so the operator can inspect the file.
func openBolt(dir, path string, timeout time.Duration) (_ *bolt.DB, err error) {
	var (
		file *os.File
		db   *bolt.DB
	)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if db != nil {
			db.Close()
		} else if file != nil {
			unlockFile(file)
			file.Close()
		}
		err = protocol.Wrap(corrupt("%s is damaged (reading it failed); airlockd will not reset it: move it aside to start with empty state", path),
			fmt.Errorf("bbolt: %v", r))
	}()

	db, err = bolt.Open(path, fileMode, &bolt.Options{
		Timeout: timeout,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := openDBFile(name, flag, mode)
			file = f
			return f, err
		},
	})
	if err != nil {
		return nil, classifyOpenError(dir, path, timeout, err)
	}
	if err := checkConsistency(db, path, file); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func classifyOpenError(dir, path string, timeout time.Duration, err error) error {
	var pe *protocol.Error
	switch {
	case errors.As(err, &pe):
		return err
	case errors.Is(err, berrors.ErrTimeout):
		return protocol.Wrap(protocol.Errorf(CodeStateLocked,
			"state directory %s is in use by another airlockd (%s stayed locked for %v)", dir, path, timeout), err)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return protocol.Wrap(corrupt("%s is not a readable bbolt database (damaged, truncated or another kind of file); airlockd will not reset it: move it aside to start with empty state", path), err)
	}
	var perr *fs.PathError
	if errors.As(err, &perr) {
		// The file could not be opened or locked at all: an operating-system error.
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	// bbolt reports some damage, such as a file too small to map, with plain errors.
	return protocol.Wrap(corrupt("%s is not a readable bbolt database (damaged, truncated or another kind of file); airlockd will not reset it: move it aside to start with empty state", path), err)
}

// checkConsistency refuses a file shorter than its meta page says, then runs bbolt's page-level
// consistency check. Open calls it before any writer exists, as a read-only Check requires.
func checkConsistency(db *bolt.DB, path string, file *os.File) error {
	fi, err := file.Stat()
	if err != nil {
		return fmt.Errorf("store: stat %s: %w", path, err)
	}
	return db.View(func(tx *bolt.Tx) error {
		if fi.Size() < tx.Size() {
			return corrupt("%s is truncated (%d bytes, its meta page needs %d); airlockd will not reset it: move it aside to start with empty state",
				path, fi.Size(), tx.Size())
		}
		var errs []error
		for err := range tx.Check() {
			if len(errs) < 8 { // enough to diagnose; keep draining so Check's goroutine ends
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return protocol.Wrap(corrupt("%s failed bbolt's consistency check; airlockd will not reset it: move it aside to start with empty state", path),
				errors.Join(errs...))
		}
		return nil
	})
}

// Close closes the database. It is idempotent and safe to call concurrently with other methods,
// which fail once it has run.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}

// Path returns the path of the database file.
func (s *Store) Path() string { return s.path }
