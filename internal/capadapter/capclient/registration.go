package capclient

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// Registration bounds.
const (
	// MaxAdapterArgs bounds the argv of an adapter, the command excluded.
	MaxAdapterArgs = 16
	// MaxArgBytes bounds the command and each argument.
	MaxArgBytes = 1024
	// MaxRegistrationBytes bounds the command and arguments together.
	MaxRegistrationBytes = 16 << 10
	// MaxAdapters bounds the registrations one Supervisor runs.
	MaxAdapters = 64
)

var adapterNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// Registration is an operator's local execution approval for one adapter: a name, the
// command and its arguments, the SHA-256 of the files approved to run, and, for a temporary
// adapter, what it is tied to and when its lease ends. It is all that is persisted; adapter
// configuration and secrets stay with the adapter (never put secrets in argv: other local
// users can read it).
type Registration struct {
	Name    string   `json:"name"`
	Command string   `json:"command"`
	Args    []string `json:"args"`

	// Room ties the registration to a room: closing the room removes it (the daemon's
	// RemoveForRoom). Session and Generation tie it to one session generation instead:
	// closing that generation, or opening a newer one, removes it. At most one tie.
	Room       string `json:"room,omitempty"`
	Session    string `json:"session,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// LeaseExpires, when set, is when the supervisor removes the registration by itself.
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`

	// Digests are the files approved to run (see ScriptPath), recorded by Register and
	// Approve and checked before every start. The caller never sets them on Register; a
	// restored registration without them (stored before digests existed) gets them recorded
	// at its first start.
	Digests []FileDigest `json:"digests,omitempty"`
}

// Tie bounds.
const (
	// MaxSessionIDLen bounds Registration.Session, as the daemon protocol bounds session ids.
	MaxSessionIDLen = 256
	// MaxLease bounds a lease: a temporary adapter is temporary.
	MaxLease = 30 * 24 * time.Hour
)

// roomIDPattern is the room id grammar of internal/room.
var roomIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// Temporary reports whether r is tied to a room or a session, or has a lease.
func (r Registration) Temporary() bool {
	return r.Room != "" || r.Session != "" || !r.LeaseExpires.IsZero()
}

func invalidRegistration(detail string) *capadapter.Error {
	return newError(capadapter.CodeInvalidRegistration, detail)
}

// NormalizeRegistration checks r against the registration bounds and resolves its command:
// an absolute path must name an executable regular file; a bare name is looked up in this
// process's PATH and replaced by the absolute path found; a relative path is refused. The
// result is what a caller should persist. Errors are invalid_registration.
func NormalizeRegistration(r Registration) (Registration, error) {
	if !adapterNamePattern.MatchString(r.Name) {
		return Registration{}, invalidRegistration("name must match " + adapterNamePattern.String())
	}
	if len(r.Args) > MaxAdapterArgs {
		return Registration{}, invalidRegistration("more than 16 arguments")
	}
	total := len(r.Command)
	for _, s := range append([]string{r.Command}, r.Args...) {
		if len(s) > MaxArgBytes || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
			return Registration{}, invalidRegistration("the command and each argument must be UTF-8 of at most 1024 bytes without NUL")
		}
	}
	for _, a := range r.Args {
		total += len(a)
	}
	if total > MaxRegistrationBytes {
		return Registration{}, invalidRegistration("command and arguments exceed 16 KiB")
	}
	if strings.TrimSpace(r.Command) == "" {
		return Registration{}, invalidRegistration("empty command")
	}
	switch {
	case r.Room != "" && !roomIDPattern.MatchString(r.Room):
		return Registration{}, invalidRegistration("room must match " + roomIDPattern.String())
	case r.Room != "" && r.Session != "":
		return Registration{}, invalidRegistration("a registration is tied to a room or to a session, not both")
	case r.Session != "" && (len(r.Session) > MaxSessionIDLen || !utf8.ValidString(r.Session) || strings.ContainsFunc(r.Session, unicode.IsControl)):
		return Registration{}, invalidRegistration("session must be 1 to 256 characters without control characters")
	case (r.Session != "") != (r.Generation > 0) || r.Generation < 0:
		return Registration{}, invalidRegistration("a session tie names a session and a generation of at least 1")
	}
	path, err := resolveCommand(r.Command)
	if err != nil {
		return Registration{}, err
	}
	n := r
	n.Command, n.Args = path, append([]string{}, r.Args...)
	n.Digests = slices.Clone(r.Digests)
	return n, nil
}

func resolveCommand(cmd string) (string, error) {
	switch {
	case filepath.IsAbs(cmd):
		fi, err := os.Stat(cmd)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", invalidRegistration("command is not an executable file")
		}
		return filepath.Clean(cmd), nil
	case strings.ContainsRune(cmd, '/'):
		return "", invalidRegistration("command must be an absolute path or a name found in PATH")
	}
	path, err := exec.LookPath(cmd)
	if err != nil || errors.Is(err, exec.ErrDot) || !filepath.IsAbs(path) {
		return "", invalidRegistration("command is not found in PATH as an absolute executable")
	}
	return path, nil
}

// envAllowlist names the only variables an adapter inherits from the daemon, when set: enough
// to find programs, a home and temporary directory, and the locale and time zone. Everything
// else (provider keys, tokens, the daemon's own settings) stays out of the child. An adapter
// that needs configuration reads its own file.
var envAllowlist = []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// adapterEnv returns the environment of an adapter child.
func adapterEnv() []string {
	env := make([]string, 0, len(envAllowlist))
	for _, k := range envAllowlist {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
