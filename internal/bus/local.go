package bus

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// A local server (ServerConfig.Host, no fabric) admits nkey users only, as a fabric's cluster
// node does: there is no anonymous user and no default user, so a process that holds no
// host's seed cannot connect at all, the embedding daemon's own connection included.
//
//   - The embedding host is a user with the permissions HostPermissions gives its rooms; it
//     may connect in process only, so its seed file is worth nothing to a network client.
//   - Every other host (another daemon of the same operator, admitted with SetUsers) is a user
//     with the permissions of its own rooms, connecting over the loopback listener.
//   - The warden is the server's own privileged user: all subjects, in process only, with a
//     key made at start and kept in memory. The embedding daemon reads every room's roster
//     with it, to keep the other hosts' permissions to the rooms they are in.

// inProcess is the connection type of an in-process client (jwt.ConnectionTypeInProcess).
const inProcess = "IN_PROCESS"

// LocalHost is the host that embeds a local server.
type LocalHost struct {
	// ID is the host's id (64 lowercase hex).
	ID string
	// Key is the host's nkey user (LoadOrCreateSeed).
	Key nkeys.KeyPair
}

// local is the authentication of a local server.
type local struct {
	host    string
	hostPub string
	key     nkeys.KeyPair
	warden  nkeys.KeyPair
}

func newLocal(h *LocalHost) (*local, error) {
	if h.Key == nil || !validHostID(h.ID) {
		return nil, fmt.Errorf("%w: a local host needs its id and nkey", ErrConfig)
	}
	pub, err := h.Key.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("%w: the local host's key is not an nkey user", ErrConfig)
	}
	warden, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("bus: warden key: %w", err)
	}
	return &local{host: h.ID, hostPub: pub, key: h.Key, warden: warden}, nil
}

// users checks users as a fabric file's and turns them into the server's nkey users, with
// the host's own user (which must be among them) confined to in-process connections and the
// warden added.
func (l *local) users(users []FabricUser) ([]*server.NkeyUser, error) {
	if err := (&FabricFile{Users: users}).checkUsers(); err != nil {
		return nil, err
	}
	wardenPub, err := l.warden.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("bus: warden key: %w", err)
	}
	out := make([]*server.NkeyUser, 0, len(users)+1)
	self := false
	for _, u := range users {
		if u.Nkey == wardenPub {
			return nil, invalid("users", "repeats a host or an nkey")
		}
		rooms := make([]Membership, 0, len(u.Rooms))
		for _, r := range u.Rooms {
			rooms = append(rooms, Membership{Room: r, Owner: contains(u.Owns, r)})
		}
		nu := &server.NkeyUser{Nkey: u.Nkey, Permissions: HostPermissions(DefaultRoomScheme, u.Host, rooms)}
		switch {
		case u.Host == l.host && u.Nkey == l.hostPub:
			nu.AllowedConnectionTypes = map[string]struct{}{inProcess: {}}
			self = true
		case u.Host == l.host || u.Nkey == l.hostPub:
			return nil, invalid("users", "another user with this server's host id or nkey")
		}
		out = append(out, nu)
	}
	if !self {
		return nil, invalid("users", "no user for this server's host")
	}
	return append(out, &server.NkeyUser{Nkey: wardenPub, AllowedConnectionTypes: map[string]struct{}{inProcess: {}}}), nil
}

// setLocalUsers is SetUsers of a local server.
func (s *Server) setLocalUsers(users []FabricUser) error {
	nk, err := s.local.users(users)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.opts.Clone()
	next.Nkeys = nk
	if err := s.ns.ReloadOptions(next); err != nil {
		return fmt.Errorf("bus: set users: %w", err)
	}
	s.opts = next
	return nil
}

// HostDialConfig is the configuration of the embedding host's connection to a local server:
// in process, as its nkey user, with its inbox prefix. It is the zero DialConfig with Server
// set for a server without ServerConfig.Host.
func (s *Server) HostDialConfig() DialConfig {
	if s.local == nil {
		return DialConfig{Server: s}
	}
	return DialConfig{Server: s, Name: s.local.host, InboxPrefix: InboxPrefix(s.local.host), Nkey: s.local.key}
}

// WardenDialConfig is the configuration of a local server's privileged connection: in
// process, as the warden, allowed every subject. Its key never leaves this process's memory.
// ok is false for a server without ServerConfig.Host.
func (s *Server) WardenDialConfig() (cfg DialConfig, ok bool) {
	if s.local == nil {
		return DialConfig{}, false
	}
	return DialConfig{Server: s, Name: "warden", Nkey: s.local.warden}, true
}

// NkeyPublic is the public key ("U…") of an nkey user.
func NkeyPublic(kp nkeys.KeyPair) (string, error) {
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("%w: not an nkey user", ErrConfig)
	}
	return pub, nil
}

// ValidNkey reports whether s is an nkey user public key ("U…").
func ValidNkey(s string) bool { return nkeys.IsValidPublicUserKey(s) }

// ValidHostID reports whether s is a host id: 64 lowercase hex.
func ValidHostID(s string) bool { return validHostID(s) }

// maxSeedBytes bounds a seed file: a seed is 58 characters and a newline.
const maxSeedBytes = 256

// LoadOrCreateSeed reads the nkey user seed at path, or creates one there (mode 0600) when no
// file exists. The file must be a regular file with no group or other permission bits; the
// seed stays in memory and is never printed. created reports a new seed.
func LoadOrCreateSeed(path string) (kp nkeys.KeyPair, created bool, err error) {
	kp, err = loadSeed(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return kp, false, err
	}
	kp, err = nkeys.CreateUser()
	if err != nil {
		return nil, false, fmt.Errorf("bus: seed: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, false, fmt.Errorf("bus: seed: %w", err)
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another start created it first: use that one.
		kp, err = loadSeed(path)
		return kp, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("bus: seed: %w", err)
	}
	_, werr := fh.Write(append(seed, '\n'))
	if werr == nil {
		werr = fh.Sync()
	}
	if cerr := fh.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, false, fmt.Errorf("bus: seed: write: %w", werr)
	}
	return kp, true, nil
}

func loadSeed(path string) (nkeys.KeyPair, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("bus: seed: %w", err)
		}
		return nil, fmt.Errorf("%w: seed file %s cannot be opened without following a link", ErrConfig, path)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("bus: seed: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: seed file %s must be a regular file of mode 0600", ErrConfig, path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxSeedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("bus: seed: %w", err)
	}
	if len(data) > maxSeedBytes {
		return nil, fmt.Errorf("%w: seed file %s is too large", ErrConfig, path)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
	if err != nil {
		return nil, fmt.Errorf("%w: seed file %s holds no nkey seed", ErrConfig, path)
	}
	if _, err := NkeyPublic(kp); err != nil {
		return nil, fmt.Errorf("%w: seed file %s holds no nkey user seed", ErrConfig, path)
	}
	return kp, nil
}
