package room

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// HostKeyFile is the name of the host key file in the state directory.
const HostKeyFile = "host.key"

// hostKeyHeader is the first line of a host key file; the second is the base64 (standard,
// padded) Ed25519 seed. Nothing else is in the file.
const hostKeyHeader = "airlock-host-key-v1\n"

// maxHostKeyFileBytes bounds the read of a host key file (the valid size is 66 bytes).
const maxHostKeyFileBytes = 256

// HostID names a host: the lowercase hex of its Ed25519 public key, so the id is the key and
// a member list of ids is a list of public keys.
type HostID string

// Valid reports whether id is 64 lowercase hex digits.
func (id HostID) Valid() bool {
	return len(id) == 64 && matchName(string(id), 64, hexLowerByte, hexLowerByte)
}

// PublicKey decodes the key id names, or returns nil for an invalid id.
func (id HostID) PublicKey() ed25519.PublicKey {
	if !id.Valid() {
		return nil
	}
	k, _ := hex.DecodeString(string(id))
	return k
}

// kxLabel is the HKDF info that derives a host's X25519 key from its Ed25519 seed.
const kxLabel = "airlock-host-x25519-v1"

// HostKey is a host's Ed25519 key pair, and beside it the host's static X25519 key, which
// authenticates its calls and replies to each other host (see KeyRecord). The private halves
// never leave it: String, GoString and MarshalText show the public id only.
type HostKey struct {
	priv ed25519.PrivateKey
	id   HostID
	// kx is derived from the Ed25519 seed with HKDF-SHA256 under kxLabel: an independent key,
	// stable across restarts, with no file of its own.
	kx    *ecdh.PrivateKey
	kxPub [32]byte
	links linkCache
}

func newHostKey(seed []byte) *HostKey {
	priv := ed25519.NewKeyFromSeed(seed)
	kxSeed, err := hkdf.Key(sha256.New, seed, nil, kxLabel, 32)
	if err != nil {
		panic("room: deriving the X25519 key: " + err.Error()) // 32 bytes of SHA-256 HKDF cannot fail
	}
	k := &HostKey{priv: priv, id: HostID(hex.EncodeToString(priv.Public().(ed25519.PublicKey)))}
	k.setKX(kxSeed)
	return k
}

// setKX installs the X25519 private key x (any 32 bytes: X25519 clamps them).
func (k *HostKey) setKX(x []byte) {
	kx, err := ecdh.X25519().NewPrivateKey(x)
	if err != nil {
		panic("room: X25519 key: " + err.Error()) // only a wrong length fails
	}
	k.kx = kx
	copy(k.kxPub[:], kx.PublicKey().Bytes())
	k.links.mu.Lock()
	k.links.m = nil
	k.links.mu.Unlock()
}

// GenerateHostKey returns a fresh key pair that is stored nowhere (tests, simulations).
func GenerateHostKey() (*HostKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(rand.Reader, seed); err != nil {
		return nil, fmt.Errorf("room: host key: %w", err)
	}
	return newHostKey(seed), nil
}

// ID is the host's public identity.
func (k *HostKey) ID() HostID { return k.id }

// Sign signs msg with the private key.
func (k *HostKey) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// String shows the public id only.
func (k *HostKey) String() string { return "hostkey:" + string(k.id) }

// GoString shows the public id only, for %#v.
func (k *HostKey) GoString() string { return k.String() }

// MarshalText encodes the public id only, so a key that ends up in JSON or a log is harmless.
func (k *HostKey) MarshalText() ([]byte, error) { return []byte(k.id), nil }

// LoadOrCreateHostKey loads the host key from stateDir/host.key, creating it (mode 0600) when
// the file does not exist; created says which. The key is never printed or logged here.
func LoadOrCreateHostKey(stateDir string) (key *HostKey, created bool, err error) {
	path := filepath.Join(stateDir, HostKeyFile)
	key, err = LoadHostKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(rand.Reader, seed); err != nil {
		return nil, false, fmt.Errorf("room: host key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another start created it first: use that one.
		key, err = LoadHostKey(path)
		return key, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("room: host key: %w", err)
	}
	content := hostKeyHeader + base64.StdEncoding.EncodeToString(seed) + "\n"
	_, werr := f.WriteString(content)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, false, fmt.Errorf("room: host key: write: %w", werr)
	}
	return newHostKey(seed), true, nil
}

// LoadHostKey reads a host key file. A missing file gives an error wrapping fs.ErrNotExist;
// a symlink, a file with any group or other permission bit, or content other than exactly the
// header line and a base64 seed line gives ErrInvalidKey.
func LoadHostKey(path string) (*HostKey, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|noFollow, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("room: host key: %w", err)
		}
		return nil, &Error{Code: CodeInvalidKey, Detail: "cannot open the host key file without following a link"}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("room: host key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, newError(CodeInvalidKey, "the host key file is not a regular file")
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, newError(CodeInvalidKey, fmt.Sprintf("the host key file has mode %04o; it must be 0600", fi.Mode().Perm()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxHostKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("room: host key: %w", err)
	}
	seed, ok := parseHostKey(data)
	if !ok {
		return nil, newError(CodeInvalidKey, "the host key file is malformed")
	}
	return newHostKey(seed), nil
}

// parseHostKey returns the seed of a well-formed host key file's content.
func parseHostKey(data []byte) ([]byte, bool) {
	if len(data) > maxHostKeyFileBytes || !bytes.HasPrefix(data, []byte(hostKeyHeader)) {
		return nil, false
	}
	line, ok := bytes.CutSuffix(data[len(hostKeyHeader):], []byte("\n"))
	if !ok || bytes.ContainsAny(line, "\r\n") {
		return nil, false
	}
	seed, err := base64.StdEncoding.Strict().DecodeString(string(line))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, false
	}
	return seed, true
}
