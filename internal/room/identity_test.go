package room

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostKeyIsCreatedOnceAndLoadedAgain(t *testing.T) {
	dir := t.TempDir()
	k1, created, err := LoadOrCreateHostKey(dir)
	if err != nil || !created {
		t.Fatalf("first start: %v, created %v", err, created)
	}
	fi, err := os.Stat(filepath.Join(dir, HostKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	k2, created, err := LoadOrCreateHostKey(dir)
	if err != nil || created || k2.ID() != k1.ID() {
		t.Fatalf("second start: %v, created %v, same id %v", err, created, k2.ID() == k1.ID())
	}
	if !k1.ID().Valid() || len(k1.ID().PublicKey()) != 32 {
		t.Fatalf("bad id %q", k1.ID())
	}

	// Only the public id is ever shown.
	content, _ := os.ReadFile(filepath.Join(dir, HostKeyFile))
	seed := strings.TrimSpace(strings.TrimPrefix(string(content), hostKeyHeader))
	js, _ := json.Marshal(struct{ K *HostKey }{k1})
	for _, shown := range []string{k1.String(), fmt.Sprintf("%v %+v %#v %s", k1, k1, k1, k1), string(js)} {
		if strings.Contains(shown, seed) || !strings.Contains(shown, string(k1.ID())) {
			t.Errorf("shown key %q leaks the seed or lacks the id", shown)
		}
	}
}

func TestLoadHostKeyRefusesUnsafeOrMalformedFiles(t *testing.T) {
	dir := t.TempDir()
	good, _, err := LoadOrCreateHostKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid, _ := os.ReadFile(filepath.Join(dir, HostKeyFile))

	cases := []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{"group readable", string(valid), 0o640},
		{"world readable", string(valid), 0o604},
		{"empty", "", 0o600},
		{"no header", strings.TrimPrefix(string(valid), hostKeyHeader), 0o600},
		{"no final newline", strings.TrimSuffix(string(valid), "\n"), 0o600},
		{"extra line", string(valid) + "more\n", 0o600},
		{"CRLF", strings.ReplaceAll(string(valid), "\n", "\r\n"), 0o600},
		{"short seed", hostKeyHeader + "AAAA\n", 0o600},
		{"not base64", hostKeyHeader + strings.Repeat("!", 44) + "\n", 0o600},
		{"huge", hostKeyHeader + strings.Repeat("A", 4096) + "\n", 0o600},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), HostKeyFile)
			if err := os.WriteFile(path, []byte(tc.content), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			_, err := LoadHostKey(path)
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("LoadHostKey = %v, want invalid_key", err)
			}
			if strings.Contains(err.Error(), strings.TrimSpace(strings.TrimPrefix(string(valid), hostKeyHeader))) {
				t.Fatal("the error quotes the key")
			}
			// LoadOrCreate refuses too: it never replaces a file it cannot trust.
			if _, _, err := LoadOrCreateHostKey(filepath.Dir(path)); !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("LoadOrCreateHostKey = %v, want invalid_key", err)
			}
		})
	}

	t.Run("symlink", func(t *testing.T) {
		d := t.TempDir()
		if err := os.Symlink(filepath.Join(dir, HostKeyFile), filepath.Join(d, HostKeyFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadHostKey(filepath.Join(d, HostKeyFile)); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("LoadHostKey through a symlink = %v, want invalid_key", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		d := t.TempDir()
		if err := os.Mkdir(filepath.Join(d, HostKeyFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadHostKey(filepath.Join(d, HostKeyFile)); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("LoadHostKey of a directory = %v, want invalid_key", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := LoadHostKey(filepath.Join(t.TempDir(), HostKeyFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("LoadHostKey of a missing file = %v", err)
		}
	})
	if k, err := LoadHostKey(filepath.Join(dir, HostKeyFile)); err != nil || k.ID() != good.ID() {
		t.Fatalf("the valid file: %v", err)
	}
}
