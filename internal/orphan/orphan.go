// Package orphan keeps the ledger of the process groups airlockd starts for its capability
// adapters, so that a daemon that was killed outright (SIGKILL, the OOM killer) leaves none of
// them running once it starts again.
//
// Each adapter child leads a process group of its own, and the kernel sends it SIGKILL when
// airlockd dies (capclient sets the parent-death signal), but that reaches the leader only: a
// helper the adapter started stays in the group and keeps running, and an adapter started by
// a daemon of an older build has no death signal at all. The ledger, a small file in the
// state directory, lists each group airlockd started and has not yet reaped, with the
// leader's start time and the boot it belongs to. Open, called once the state directory is
// locked (so that a second daemon never touches the first's children), kills every group
// listed there that still has a member, and starts an empty ledger.
//
// A group is killed only when it is provably the one recorded: its members are owned by this
// user, the boot is the same, and either its leader still runs with the recorded start time,
// or the leader is gone and members remain, in which case the group id cannot have been given
// to anything else (Linux does not reuse a pid that is some live process's group id).
//
// The file is rewritten (write, then rename) on every change and never synced: a daemon killed
// loses no written page, and a machine that loses power loses the children too.
package orphan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MaxGroups bounds the ledger: at most this many groups are recorded at once, and a file
// with more lines is read only this far. airlockd runs far fewer adapters than this.
const MaxGroups = 4096

// killWait bounds how long Open waits for the members of the groups it killed to exit.
const killWait = 5 * time.Second

// Group is one process group the ledger recorded.
type Group struct {
	PGID  int
	Start uint64 // the leader's start time, in clock ticks after boot (/proc/PID/stat field 22)
}

// Reaped is what Open did with a recorded group that still had members.
type Reaped struct {
	Group
	Members int  // processes of the group found running
	Gone    bool // all of them exited within killWait of SIGKILL
}

// Ledger is the record of the groups airlockd runs. It is safe for concurrent use.
type Ledger struct {
	path string
	boot string
	log  *slog.Logger

	mu     sync.Mutex
	groups []Group
}

// Open reads the ledger at path (none is an empty ledger), kills the groups it lists that
// still run, waits for them to exit (bounded), and returns the emptied ledger with what it
// killed. A ledger that cannot be read is set aside with its error in the log; one that
// cannot be written is an error.
func Open(path string, log *slog.Logger) (*Ledger, []Reaped, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Ledger{path: path, boot: bootID(), log: log}
	var reaped []Reaped
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("adapter ledger: %w", err)
	default:
		boot, groups, perr := Parse(data)
		if perr != nil {
			log.Warn("adapter ledger unreadable; not reaping from it", "path", path, "err", perr)
		} else if boot == l.boot && l.boot != "" {
			reaped = killGroups(groups, os.Geteuid())
		}
	}
	if err := l.write(nil); err != nil {
		return nil, nil, err
	}
	return l, reaped, nil
}

// Started records the process group led by pid, a child that has just started.
func (l *Ledger) Started(pid int) {
	st, ok := readStat(pid)
	if !ok {
		return // already gone: nothing to reap later
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.groups) >= MaxGroups {
		l.log.Warn("adapter ledger full; the group is not recorded", "pgid", pid)
		return
	}
	groups := append(slices.Clone(l.groups), Group{PGID: pid, Start: st.start})
	if err := l.write(groups); err != nil {
		l.log.Warn("adapter ledger not written", "err", err)
		return
	}
	l.groups = groups
}

// Reaped forgets the group led by pid, whose leader has been reaped and whose members have
// been sent SIGKILL.
func (l *Ledger) Reaped(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.IndexFunc(l.groups, func(g Group) bool { return g.PGID == pid })
	if i < 0 {
		return
	}
	groups := slices.Delete(slices.Clone(l.groups), i, i+1)
	if err := l.write(groups); err != nil {
		l.log.Warn("adapter ledger not written", "err", err)
		return
	}
	l.groups = groups
}

// Groups returns the groups recorded now.
func (l *Ledger) Groups() []Group {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.groups)
}

// write replaces the file with groups; l.mu is held (or l is not shared yet).
func (l *Ledger) write(groups []Group) error {
	tmp, err := os.CreateTemp(filepath.Dir(l.path), ".children-*")
	if err != nil {
		return fmt.Errorf("adapter ledger: %w", err)
	}
	_, werr := tmp.Write(Format(l.boot, groups))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("adapter ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("adapter ledger: %w", err)
	}
	return nil
}

const header = "airlockd adapter groups v1 boot "

// Format is the ledger's text: a header line naming the boot, then a line per group, its
// id and its leader's start time.
func Format(boot string, groups []Group) []byte {
	var b bytes.Buffer
	b.WriteString(header + boot + "\n")
	for _, g := range groups {
		fmt.Fprintf(&b, "%d %d\n", g.PGID, g.Start)
	}
	return b.Bytes()
}

// Parse reads a ledger's text. It refuses a missing or foreign header, and any line that is
// not two positive decimal numbers, and reads at most MaxGroups groups.
func Parse(data []byte) (boot string, groups []Group, err error) {
	s := bufio.NewScanner(bytes.NewReader(data))
	s.Buffer(nil, 256)
	if !s.Scan() {
		return "", nil, errors.New("no header")
	}
	first := s.Text()
	boot, ok := strings.CutPrefix(first, header)
	if !ok || !validBoot(boot) {
		return "", nil, errors.New("not an adapter ledger")
	}
	for s.Scan() {
		if len(groups) == MaxGroups {
			break
		}
		a, b, ok := strings.Cut(s.Text(), " ")
		pgid, err1 := strconv.Atoi(a)
		start, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || pgid <= 1 || start == 0 {
			return "", nil, fmt.Errorf("line %d is not a group", len(groups)+2)
		}
		groups = append(groups, Group{PGID: pgid, Start: start})
	}
	if err := s.Err(); err != nil {
		return "", nil, err
	}
	return boot, groups, nil
}

// bootID names this boot of the machine (a UUID), or is empty when the kernel does not say.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	if id := strings.TrimSpace(string(b)); validBoot(id) {
		return id
	}
	return ""
}

// validBoot reports whether id can name a boot in the ledger: 1 to 64 lower-case hex digits
// and dashes, as the kernel's boot id is.
func validBoot(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range []byte(id) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && c != '-' {
			return false
		}
	}
	return true
}

// stat is what the ledger needs of /proc/PID/stat.
type stat struct {
	pgrp  int
	start uint64
}

func readStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	return parseStat(b)
}

// parseStat reads the process group (field 5) and start time (field 22) of a
// /proc/PID/stat line. The command name (field 2) is in parentheses and may hold anything,
// parentheses and spaces included, so the fields are counted from its last ')'.
func parseStat(b []byte) (stat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 20 {
		return stat{}, false
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return stat{}, false
	}
	return stat{pgrp: pgrp, start: start}, true
}

// killGroups kills each group of groups that is provably the one recorded (see the package
// comment) and waits, bounded, for its members to exit.
func killGroups(groups []Group, uid int) []Reaped {
	members := map[int][]int{} // pgid → pids
	want := map[int]bool{}
	for _, g := range groups {
		want[g.PGID] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok || !want[st.pgrp] {
			continue
		}
		var sys unix.Stat_t
		if unix.Stat("/proc/"+e.Name(), &sys) != nil || int(sys.Uid) != uid {
			continue
		}
		members[st.pgrp] = append(members[st.pgrp], pid)
	}
	var out []Reaped
	deadline := time.Now().Add(killWait)
	for _, g := range groups {
		pids := members[g.PGID]
		if len(pids) == 0 {
			continue
		}
		if st, ok := readStat(g.PGID); ok && st.start != g.Start {
			continue // the leader is another process: not the group recorded
		}
		// pidfds first, so that a pid reused after its exit is never mistaken for it.
		var fds []int
		for _, pid := range pids {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				fds = append(fds, fd)
			}
		}
		_ = unix.Kill(-g.PGID, unix.SIGKILL)
		out = append(out, Reaped{Group: g, Members: len(pids), Gone: waitExited(fds, deadline)})
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	return out
}

// waitExited waits until every pidfd of fds is readable (its process exited) or deadline
// passes, and reports whether all exited.
func waitExited(fds []int, deadline time.Time) bool {
	for _, fd := range fds {
		for {
			ms := int(time.Until(deadline).Milliseconds())
			if ms <= 0 {
				return false
			}
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return false
			}
			break
		}
	}
	return true
}
