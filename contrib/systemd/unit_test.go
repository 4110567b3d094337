package systemd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/daemontest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(daemontest.Main(m))
}

// securityThreshold is the exposure systemd-analyze security may report for the unit, in its
// tenths (2.3 "OK" is 23). The unit reaches 2.3; what is left is what airlockd's work needs
// (the network, AF_UNIX and AF_NETLINK, read access to home directories, /dev for adapters'
// devices, @resources, and openat2 for the airlock-fs it runs, which RestrictSUIDSGID= would
// take away: 0.2 of it) or what a user unit cannot have (ProtectProc=, IPAddressDeny=,
// DeviceAllow=; "runs as root" is the offline analysis not knowing a user unit's user).
// Before the confinement the unit scored 9.6 UNSAFE.
const securityThreshold = 23

// Deadlines of the live test. Building and starting a race-free airlockd, a user manager and
// three adapter children on a loaded two-core machine takes seconds; these bound a hang.
const (
	commandTimeout = 60 * time.Second
	readyTimeout   = 60 * time.Second
	managerStop    = 60 * time.Second
)

var unitPath = func() string {
	p, err := filepath.Abs("airlockd.service")
	if err != nil {
		panic(err)
	}
	return p
}()

// need skips the test when cond is false, or fails it under CI=true, where every tool the
// test needs is installed on purpose (.ci/run) and a missing one is a regression to see.
func need(t *testing.T, cond bool, format string, args ...any) {
	t.Helper()
	if cond {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", msg)
	}
	t.Skip(msg)
}

func lookPath(t *testing.T, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	need(t, false, "%s is not installed", names[0])
	return ""
}

// systemPath finds name in the user manager's PATH.
func systemPath(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range strings.Split(managerPATH, ":") {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o001 != 0 {
			return p
		}
	}
	need(t, false, "%s is not installed in %s", name, managerPATH)
	return ""
}

// buildBinaries builds airlockd, airlock and the go-lamp adapter without -race: the unit
// runs what an operator installs, and the race runtime's own personality and memory-layout
// tricks are not what the sandbox is tested against.
func buildBinaries(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/airlockd", "./cmd/airlock", "./cmd/airlock-fs", "./examples/adapters/go-lamp")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestUnitAnalyze runs systemd-analyze verify (which must print nothing: an unknown or
// misspelt directive is only a warning) and systemd-analyze security --offline with the
// threshold the confinement reaches.
func TestUnitAnalyze(t *testing.T) {
	analyze := lookPath(t, "systemd-analyze")
	bin := buildBinaries(t)
	// verify resolves %h and %t: a home with the installed binary, and a runtime directory.
	home := t.TempDir()
	copyFile(t, filepath.Join(bin, "airlockd"), filepath.Join(home, ".local", "bin", "airlockd"), 0o755)
	env := append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+t.TempDir())

	var stdout, stderr bytes.Buffer
	cmd := exec.Command(analyze, "verify", "--user", "--man=no", unitPath)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	if err := cmd.Run(); err != nil || stdout.Len()+stderr.Len() > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}

	stdout.Reset()
	stderr.Reset()
	cmd = exec.Command(analyze, "security", "--user", "--offline=true", "--no-pager",
		"--threshold="+strconv.Itoa(securityThreshold), unitPath)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	err := cmd.Run()
	level := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+ \S+)`).FindSubmatch(stdout.Bytes())
	if level == nil {
		t.Fatalf("systemd-analyze security printed no overall exposure: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	t.Logf("systemd-analyze security: %s", level[1])
	if err != nil {
		t.Errorf("systemd-analyze security --threshold=%d: %v (exposure %s)\n%s%s", securityThreshold, err, level[1], stdout.Bytes(), stderr.Bytes())
	}
}

// userManager is a systemd --user instance for an unprivileged user, started by root in a
// private mount namespace, with its own home and runtime directory.
type userManager struct {
	t        *testing.T
	cmd      *exec.Cmd
	exited   chan struct{}
	uid, gid string
	username string
	home     string // the home directory, as this test (outside the namespace) sees it
	console  string // the manager's log: its /dev/console inside the namespace
	cgroup   string
	cgroup2  string       // where the cgroup2 hierarchy is mounted
	systemd  string       // the systemd binary
	out      bytes.Buffer // the manager's stdout and stderr; read only after exited is closed
}

// homeInside is the user's home inside the namespace. It is not under /tmp, which
// PrivateTmp= replaces.
const homeInside = "/home/airlock"

// managerPATH is the PATH of the user manager and of the commands the test runs as the user.
const managerPATH = "/usr/local/bin:/usr/bin:/bin"

// managerScript prepares the namespace and execs the user manager. What it fakes is only what
// a machine booted with systemd has and this one (CI: a VM whose PID 1 is not systemd) may not:
// /run/systemd/system (the "booted with systemd" mark), /run/systemd/unit-root (where PID 1
// stages services' namespaces), /run as a mount point (otherwise the manager mounts an empty
// tmpfs on /run for ProtectKernelTunables=), /run/user/UID (logind's runtime directory, where
// the user manager keeps its inaccessible nodes) and a delegated cgroup (what user@.service's
// Delegate=yes gives). /dev/console is the manager's log file, since there is no journal.
const managerScript = `set -e
uid=$1 gid=$2 home=$3 cgroup=$4 console=$5 systemd=$6 username=$7
mount --bind /run /run
mkdir -p /run/systemd /run/user
mount -t tmpfs -o mode=755 tmpfs /run/systemd
mkdir /run/systemd/system
mkdir -m 0700 /run/systemd/unit-root
mount -t tmpfs -o mode=755 tmpfs /run/user
mkdir -m 0700 /run/user/$uid
chown $uid:$gid /run/user/$uid
mkdir -p /home
mount -t tmpfs -o mode=755 tmpfs /home
mkdir ` + homeInside + `
mount --bind "$home" ` + homeInside + `
mount --bind "$console" /dev/console
echo $$ > "$cgroup/cgroup.procs"
export XDG_RUNTIME_DIR=/run/user/$uid HOME=` + homeInside + ` USER=$username LOGNAME=$username PATH=` + managerPATH + `
exec setpriv --reuid=$uid --regid=$gid --clear-groups "$systemd" --user --log-target=console --log-level=info
`

// newUserManager checks that this machine can run a private user manager, for user nobody.
func newUserManager(t *testing.T) *userManager {
	t.Helper()
	need(t, os.Geteuid() == 0, "starting a private systemd user manager needs root (to make its namespace and delegate it a cgroup); CI runs as root")
	systemd := ""
	for _, p := range []string{"/usr/lib/systemd/systemd", "/lib/systemd/systemd"} {
		if _, err := os.Stat(p); err == nil {
			systemd = p
			break
		}
	}
	need(t, systemd != "", "systemd is not installed")
	for _, tool := range []string{"systemctl", "unshare", "nsenter", "setpriv"} {
		lookPath(t, tool)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil {
		need(t, strings.TrimSpace(string(b)) != "0", "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone=0); the unit's PrivateUsers=yes needs them")
	}
	cg2 := cgroup2Root(t)
	need(t, cg2 != "", "no cgroup2 hierarchy is mounted; a user manager needs one")
	u, err := user.Lookup("nobody")
	need(t, err == nil, "no user nobody: %v", err)

	return &userManager{t: t, uid: u.Uid, gid: u.Gid, username: u.Username, systemd: systemd, cgroup2: cg2, exited: make(chan struct{})}
}

// start starts the manager with home (a directory the user owns) as its home directory.
func (m *userManager) start(home string) {
	t := m.t
	t.Helper()
	m.home = home
	m.cgroup = filepath.Join(m.cgroup2, fmt.Sprintf("airlock-unit-test-%d", rand.Uint64()))
	if err := os.Mkdir(m.cgroup, 0o755); err != nil {
		t.Fatal(err)
	}
	m.chown(m.cgroup)
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		m.chown(filepath.Join(m.cgroup, f))
	}
	m.console = filepath.Join(filepath.Dir(home), "manager.log")
	if err := os.WriteFile(m.console, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m.chown(m.console)

	m.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", managerScript, "sh",
		m.uid, m.gid, home, m.cgroup, m.console, m.systemd, m.username)
	m.cmd.Stdout, m.cmd.Stderr = &m.out, &m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(m.stop)

	// The manager answers once its private socket exists; is-system-running --wait then
	// returns when it has finished starting default.target.
	ok := daemontest.WaitFor(readyTimeout, func() bool {
		select {
		case <-m.exited:
			return true
		default:
		}
		_, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/user/%s/systemd/private", m.cmd.Process.Pid, m.uid))
		return err == nil
	})
	select {
	case <-m.exited:
		t.Fatalf("the user manager exited\n%s", m.log())
	default:
	}
	if !ok {
		t.Fatalf("the user manager did not open its socket within %s\n%s", readyTimeout, m.log())
	}
	state, _ := m.run("systemctl", "--user", "is-system-running", "--wait")
	if state != "running" {
		t.Fatalf("user manager state %q, want running\n%s", state, m.log())
	}
}

func (m *userManager) chown(path string) {
	uid, _ := strconv.Atoi(m.uid)
	gid, _ := strconv.Atoi(m.gid)
	if err := os.Lchown(path, uid, gid); err != nil {
		m.t.Fatal(err)
	}
}

// run runs a command as the user inside the manager's namespace and returns its trimmed
// stdout, and its error with stderr.
func (m *userManager) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	full := append([]string{"-t", strconv.Itoa(m.cmd.Process.Pid), "--mount", "--",
		"env", "-i", "XDG_RUNTIME_DIR=/run/user/" + m.uid, "HOME=" + homeInside, "PATH=" + managerPATH,
		"setpriv", "--reuid=" + m.uid, "--regid=" + m.gid, "--clear-groups"}, args...)
	cmd := exec.CommandContext(ctx, "nsenter", full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return strings.TrimSpace(stdout.String()), err
}

func (m *userManager) mustRun(args ...string) string {
	m.t.Helper()
	out, err := m.run(args...)
	if err != nil {
		m.t.Fatal(err)
	}
	return out
}

func (m *userManager) log() string {
	b, _ := os.ReadFile(m.console)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	s := "user manager log (tail):\n" + string(b)
	select {
	case <-m.exited:
		s += "\nuser manager output:\n" + m.out.String()
	default:
	}
	return s
}

// stop asks the manager to exit (it stops its units first), waits, and removes its cgroup.
func (m *userManager) stop() {
	// A user manager answers SIGTERM by starting exit.target: it stops its units and exits.
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(managerStop):
		m.t.Errorf("the user manager did not exit within %s; killing its cgroup\n%s", managerStop, m.log())
		os.WriteFile(filepath.Join(m.cgroup, "cgroup.kill"), []byte("1"), 0o644)
		<-m.exited
	}
	removeCgroup(m.t, m.cgroup)
}

// removeCgroup removes a cgroup directory and the ones below it, deepest first.
func removeCgroup(t *testing.T, dir string) {
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil {
			t.Errorf("remove cgroup: %v", err)
		}
	}
}

// cgroup2Root returns where the cgroup2 hierarchy is mounted: /sys/fs/cgroup on a unified
// machine, /sys/fs/cgroup/unified on a hybrid one, "" when there is none.
func cgroup2Root(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		before, after, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(before), strings.Fields(after)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" {
			return f[4]
		}
	}
	return ""
}

// TestUnitUnderUserManager installs airlockd.service as an operator would (the binaries in
// ~/.local/bin, the unit in ~/.config/systemd/user), starts it under a real, unprivileged
// systemd user manager, and checks through the sandbox the unit builds: the daemon gets ready,
// capability adapters in Go, Python (over HTTP to a bulb) and Node.js start as its children
// and answer, the room bus takes a room, a durable session writes its transcript, the daemon and its children really are
// confined (no capabilities, a seccomp filter, a read-only home but the state and runtime
// directories), and a stop is a clean drain.
func TestUnitUnderUserManager(t *testing.T) {
	// The interpreters as the user manager's PATH finds them: a python3 under root's home
	// (pyenv) is not one the user may run.
	python := systemPath(t, "python3")
	node := systemPath(t, "node")
	m := newUserManager(t)
	bin := buildBinaries(t)

	base := daemontest.ShortDir(t)
	home := filepath.Join(base, "home")
	for _, name := range []string{"airlockd", "airlock", "airlock-fs", "go-lamp"} {
		copyFile(t, filepath.Join(bin, name), filepath.Join(home, ".local", "bin", name), 0o755)
	}
	units := filepath.Join(home, ".config", "systemd", "user")
	copyFile(t, unitPath, filepath.Join(units, "airlockd.service"), 0o644)
	// The one addition: with no journal on the machine, the daemon's output goes to a file.
	if err := os.MkdirAll(filepath.Join(units, "airlockd.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	logConf := "[Service]\nStandardOutput=append:" + homeInside + "/airlockd.log\nStandardError=inherit\n"
	if err := os.WriteFile(filepath.Join(units, "airlockd.service.d", "log.conf"), []byte(logConf), 0o644); err != nil {
		t.Fatal(err)
	}
	examples := filepath.Join("..", "..", "examples", "adapters")
	copyFile(t, filepath.Join(examples, "node-timer", "timer.js"), filepath.Join(home, "adapters", "timer.js"), 0o644)
	copyFile(t, filepath.Join(examples, "python-light", "light.py"), filepath.Join(home, "adapters", "light.py"), 0o644)
	bulb := startFakeBulb(t, python, filepath.Join(examples, "python-light", "fake_bulb.py"))
	light, _ := json.Marshal(map[string]string{"bulb": bulb})
	if err := os.WriteFile(filepath.Join(home, "light.json"), light, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(home, "work"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(home, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			m.chown(p)
		}
		return err
	})

	m.start(home)
	t.Cleanup(func() {
		if t.Failed() {
			status, _ := m.run("systemctl", "--user", "status", "--no-pager", "airlockd")
			daemonLog, _ := os.ReadFile(filepath.Join(home, "airlockd.log"))
			t.Logf("systemctl --user status airlockd:\n%s\nairlockd.log:\n%s\n%s", status, daemonLog, m.log())
		}
	})

	airlock := homeInside + "/.local/bin/airlock"
	m.mustRun("systemctl", "--user", "start", "airlockd")
	var probe string
	if !daemontest.WaitFor(readyTimeout, func() bool {
		out, err := m.run(airlock, "probe")
		probe = fmt.Sprint(out, err)
		return err == nil
	}) {
		t.Fatalf("airlock probe did not succeed within %s: %s", readyTimeout, probe)
	}

	t.Run("adapters", func(t *testing.T) {
		for _, a := range []struct{ name, cmd string }{
			{"lamp", homeInside + "/.local/bin/go-lamp"},
			{"light", python + " " + homeInside + "/adapters/light.py " + homeInside + "/light.json"},
			{"timer", node + " " + homeInside + "/adapters/timer.js"},
		} {
			out, err := m.run(append([]string{airlock, "adapter", "register", a.name, "--"}, strings.Fields(a.cmd)...)...)
			if err != nil || !strings.HasPrefix(out, "registered "+a.name+": ready") {
				t.Errorf("register %s: %q %v", a.name, out, err)
			}
		}
		for _, c := range []struct{ id, action, args, field, want string }{
			{"desk_lamp", "set_power", `{"on":true}`, "on", "true"},
			{"living_room_light", "set_color", `{"color":"#123456"}`, "color", `"#123456"`},
			{"kitchen_timer", "start", `{"seconds":600}`, "running", "true"},
		} {
			if _, err := m.run(airlock, "cap", "invoke", "--id", c.id, "--action", c.action, "--args", c.args); err != nil {
				t.Errorf("invoke %s: %v", c.id, err)
				continue
			}
			out, err := m.run(airlock, "cap", "observe", "--id", c.id)
			var state map[string]json.RawMessage
			if err != nil || json.Unmarshal([]byte(out), &state) != nil || string(state[c.field]) != c.want {
				t.Errorf("observe %s after %s: %q %v, want %s %s", c.id, c.action, out, err, c.field, c.want)
			}
		}
	})

	t.Run("room", func(t *testing.T) {
		// The room service's embedded NATS server listens on a loopback TCP port.
		if out, err := m.run(airlock, "room", "create", "r1"); err != nil {
			t.Errorf("room create: %q %v", out, err)
		}
	})

	t.Run("session", func(t *testing.T) {
		out, err := m.run(airlock, "session", "open", "s1", "--generation", "1", "--cwd", homeInside+"/work")
		if err != nil || !strings.HasPrefix(out, "created\n") {
			t.Fatalf("session open: %q %v", out, err)
		}
		transcripts, _ := filepath.Glob(filepath.Join(home, ".local", "state", "airlock", "sessions", "*", "*.jsonl"))
		if len(transcripts) != 1 {
			t.Errorf("transcripts under the state directory: %v, want one", transcripts)
		}
		if _, err := m.run(airlock, "session", "close", "s1", "--generation", "1"); err != nil {
			t.Error(err)
		}
	})

	t.Run("confined", func(t *testing.T) {
		pid := m.mustRun("systemctl", "--user", "show", "-p", "MainPID", "--value", "airlockd")
		children := childPIDs(t, pid)
		if len(children) != 3 {
			t.Errorf("airlockd %s has children %v, want the three adapters", pid, children)
		}
		for _, p := range append([]string{pid}, children...) {
			st := procStatus(t, p)
			for k, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "CapBnd": "0000000000000000", "CapEff": "0000000000000000"} {
				if st[k] != want {
					t.Errorf("pid %s (%s): %s %q, want %q", p, st["Name"], k, st[k], want)
				}
			}
		}
		mounts := mountOptions(t, pid)
		for point, want := range map[string]string{
			"/":                                  "ro",
			homeInside:                           "ro",
			homeInside + "/.local/state/airlock": "rw",
			"/run/user/" + m.uid + "/airlock":    "rw",
			"/tmp":                               "rw", // PrivateTmp=: its own, writable
		} {
			if got, ok := mounts[point]; !ok || got != want {
				t.Errorf("airlockd's %s is mounted %q (present %v), want %s", point, got, ok, want)
			}
		}
	})

	// The airlock-fs airlockd runs inherits the sandbox: it reads the home, and writes a
	// directory only once a drop-in lists it in ReadWritePaths= (docs/operations.md).
	t.Run("managed-fs", func(t *testing.T) {
		work := homeInside + "/work"
		if err := os.WriteFile(filepath.Join(home, "work", "notes.txt"), []byte("hello\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		m.chown(filepath.Join(home, "work", "notes.txt"))
		open := func() {
			t.Helper()
			out, err := m.run(airlock, "session", "open", "m1", "--generation", "1", "--mode", "memory", "--cwd", work, "--fs-ops", "fs.read,fs.write")
			if err != nil {
				t.Fatalf("managed open: %q %v", out, err)
			}
		}
		open()
		if out, err := m.run(airlock, "tool", "m1", "fs.read", "--generation", "1", "--arg", "path=notes.txt"); err != nil || out != "hello" {
			t.Errorf("fs.read under the unit: %q %v", out, err)
		}
		out, err := m.run(airlock, "tool", "m1", "fs.write", "--generation", "1", "--arg", "path=new.txt", "--arg", "content=x")
		if err == nil || !strings.Contains(err.Error(), "permission_denied") {
			t.Errorf("fs.write under a read-only home: %q %v, want permission_denied", out, err)
		}
		pid := m.mustRun("systemctl", "--user", "show", "-p", "MainPID", "--value", "airlockd")
		for _, p := range childPIDs(t, pid) {
			if st := procStatus(t, p); st["Name"] == "airlock-fs" && (st["NoNewPrivs"] != "1" || st["Seccomp"] != "2" || st["CapEff"] != "0000000000000000") {
				t.Errorf("airlock-fs is not confined: %v", st)
			}
		}

		rw := "[Service]\nReadWritePaths=%h/work\n"
		if err := os.WriteFile(filepath.Join(units, "airlockd.service.d", "work.conf"), []byte(rw), 0o644); err != nil {
			t.Fatal(err)
		}
		m.mustRun("systemctl", "--user", "daemon-reload")
		m.mustRun("systemctl", "--user", "restart", "airlockd")
		if !daemontest.WaitFor(readyTimeout, func() bool { _, err := m.run(airlock, "probe"); return err == nil }) {
			t.Fatal("airlockd not ready after the drop-in")
		}
		open()
		if out, err := m.run(airlock, "tool", "m1", "fs.write", "--generation", "1", "--arg", "path=new.txt", "--arg", "content=x"); err != nil {
			t.Errorf("fs.write with the drop-in: %q %v", out, err)
		}
		if b, err := os.ReadFile(filepath.Join(home, "work", "new.txt")); err != nil || string(b) != "x" {
			t.Errorf("new.txt: %q %v", b, err)
		}
		if out, err := m.run(airlock, "session", "close", "m1", "--generation", "1"); err != nil {
			t.Errorf("close: %q %v", out, err)
		}
	})

	m.mustRun("systemctl", "--user", "stop", "airlockd")
	result := m.mustRun("systemctl", "--user", "show", "-p", "Result", "-p", "ExecMainStatus", "airlockd")
	if result != "Result=success\nExecMainStatus=0" {
		t.Errorf("after stop: %q, want a clean exit", result)
	}
	// RuntimeDirectoryPreserve=yes: airlock-fs's sockets share the directory.
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/user/%s/airlock", m.cmd.Process.Pid, m.uid)); err != nil {
		t.Errorf("the runtime directory went with the daemon: %v", err)
	}
}

// startFakeBulb runs examples/adapters/python-light/fake_bulb.py on a loopback port and
// returns its base URL; it stops when its stdin closes, at the end of the test.
func startFakeBulb(t *testing.T, python, script string) string {
	t.Helper()
	cmd := exec.Command(python, script, "--port", "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	// Its one line of output, "listening PORT"; ReadSlice reads at most the buffer's 64 bytes.
	line, err := bufio.NewReaderSize(stdout, 64).ReadSlice('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(string(line)), "listening ")
	if _, perr := strconv.Atoi(port); err != nil || !ok || perr != nil {
		t.Fatalf("fake bulb said %q: %v", line, err)
	}
	return "http://127.0.0.1:" + port
}

// childPIDs returns the pids whose parent is pid.
func childPIDs(t *testing.T, pid string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if st := procStatus(t, e.Name()); st["PPid"] == pid {
			out = append(out, e.Name())
		}
	}
	return out
}

// procStatus returns /proc/PID/status as a map (empty when the process has gone).
func procStatus(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	st := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st
}

// mountOptions returns, for each mount point of pid's namespace, whether the top mount there
// is "ro" or "rw".
func mountOptions(t *testing.T, pid string) map[string]string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 {
			out[f[4]], _, _ = strings.Cut(f[5], ",")
		}
	}
	return out
}
