package capclient

import (
	"errors"
	"fmt"
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
	// MaxPassEnv bounds the environment variables a registration names (Registration.PassEnv).
	MaxPassEnv = 16
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

	// PassEnv names environment variables that the child gets from the daemon's own
	// environment, when set there, besides those of envAllowlist (see CheckPassEnv): CUPS_SERVER
	// for an adapter that runs lpstat, say. The names are part of the approval and are shown
	// and persisted; the values are read at each start and never stored, logged or shown.
	PassEnv []string `json:"passEnv,omitempty"`

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
	if err := CheckPassEnv(r.PassEnv); err != nil {
		return Registration{}, err
	}
	path, err := resolveCommand(r.Command)
	if err != nil {
		return Registration{}, err
	}
	n := r
	n.Command, n.Args = path, append([]string{}, r.Args...)
	n.PassEnv = slices.Clone(r.PassEnv)
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

// envAllowlist names the variables every adapter inherits from the daemon, when set: enough
// to find programs, a home and temporary directory, and the locale and time zone. Everything
// else (provider keys, tokens, the daemon's own settings) stays out of the child, unless the
// operator names it in the registration (Registration.PassEnv). An adapter that needs
// configuration reads its own file.
var envAllowlist = []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// passEnvPattern is the grammar of a variable name in Registration.PassEnv: the portable
// shell name (letters, digits, underscore, not starting with a digit), at most 64 bytes.
var passEnvPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// refusedEnv and refusedEnvPrefixes are the variables a registration may not pass. The
// approval of an adapter is its command and the SHA-256 of its files (see ScriptPath); each of
// these makes the dynamic loader, an interpreter or a shell load or run code other than those
// files (LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH, NODE_OPTIONS, BASH_ENV, CLASSPATH…), so
// passing one would approve code nobody hashed. PATH is always passed and so never named.
// AIRLOCK_* are the daemon's own settings, which stay out of every child. Comparison ignores
// case: the loader and interpreters look up exact names, but a lowercase twin is refused too.
var (
	refusedEnv = []string{
		"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "GCONV_PATH", "GLIBC_TUNABLES",
		"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONWARNINGS", "PYTHONBREAKPOINT",
		"NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE",
		"PERL5LIB", "PERLLIB", "PERL5OPT", "PERL5DB", "PERLIO",
		"RUBYLIB", "RUBYOPT", "GEM_HOME", "GEM_PATH",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH",
		"LUA_PATH", "LUA_CPATH", "LUA_INIT", "TCLLIBPATH", "PHPRC", "PHP_INI_SCAN_DIR",
	}
	refusedEnvPrefixes = []string{"LD_", "DYLD_", "AIRLOCK_"}
)

func passEnvError(detail string) *capadapter.Error {
	return invalidRegistration("passEnv: " + detail)
}

// CheckPassEnv checks the variable names of Registration.PassEnv: at most MaxPassEnv, each
// matching ^[A-Za-z_][A-Za-z0-9_]{0,63}$, none twice, none already passed to every adapter
// (envAllowlist: PATH, HOME, USER, LOGNAME, TMPDIR, LANG, LC_ALL, LC_CTYPE, TZ), and none that
// would run unapproved code or carries the daemon's own settings (refusedEnv: LD_*, DYLD_*,
// AIRLOCK_*, BASH_ENV, PYTHONPATH, NODE_OPTIONS, PERL5LIB, CLASSPATH…). Errors are invalid_registration, naming the variable but never a value.
func CheckPassEnv(names []string) error {
	if len(names) > MaxPassEnv {
		return passEnvError(fmt.Sprintf("more than %d variables", MaxPassEnv))
	}
	for i, n := range names {
		switch {
		case !passEnvPattern.MatchString(n):
			return passEnvError(fmt.Sprintf("variable %d is not a name matching %s", i+1, passEnvPattern))
		case slices.Contains(names[:i], n):
			return passEnvError(n + " is named twice")
		case slices.Contains(envAllowlist, n):
			return passEnvError(n + " is passed to every adapter already")
		}
		if why := refusedEnvReason(n); why != "" {
			return passEnvError(n + " is refused: " + why)
		}
	}
	return nil
}

// refusedEnvReason says why the variable name may not be passed, or "" when it may.
func refusedEnvReason(name string) string {
	up := strings.ToUpper(name)
	if strings.HasPrefix(up, "AIRLOCK_") {
		return "the daemon's own settings stay out of adapters"
	}
	if slices.Contains(refusedEnv, up) || slices.ContainsFunc(refusedEnvPrefixes, func(p string) bool { return strings.HasPrefix(up, p) }) {
		return "it makes the loader, an interpreter or a shell run code other than the approved files"
	}
	return ""
}

// Environ returns the environment an adapter child gets: the allowlisted variables and those
// pass names (which must pass CheckPassEnv), each when set in this process's environment. The
// conformance harness uses it to start a child outside a Client exactly as a Client would.
func Environ(pass []string) []string { return adapterEnv(pass) }

// adapterEnv returns the environment of an adapter child: the allowlisted variables and those
// named in pass, each when set in this process's environment. pass has passed CheckPassEnv.
func adapterEnv(pass []string) []string {
	env := make([]string, 0, len(envAllowlist)+len(pass))
	for _, k := range slices.Concat(envAllowlist, pass) {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
