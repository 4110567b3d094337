package store

import (
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/airlockhq/airlock/internal/protocol"
)

func TestRegistrationsRoundTripAndSurviveReopen(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	if regs, err := s.Registrations(); err != nil || len(regs) != 0 {
		t.Fatalf("new store: Registrations = %v, %v; want none", regs, err)
	}
	light := Registration{Name: "light", Command: "/usr/bin/python3", Args: []string{"adapter.py", "--config", "c.json"}}
	printer := Registration{Name: "printer", Command: "/opt/printer-adapter"}
	for _, r := range []Registration{printer, light} {
		if err := s.PutRegistration(r); err != nil {
			t.Fatalf("PutRegistration(%s): %v", r.Name, err)
		}
	}
	// Replacing keeps one entry per name.
	light.Args = []string{"adapter.py", "--config", "other.json"}
	if err := s.PutRegistration(light); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Only {version, name, command, args} is on disk for a plain registration.
	rawView(t, s.Path(), func(tx *bolt.Tx) error {
		got := string(tx.Bucket(bucketRegistrations).Get([]byte("printer")))
		if want := `{"version":2,"name":"printer","command":"/opt/printer-adapter","args":[]}`; got != want {
			t.Errorf("stored printer = %s, want %s", got, want)
		}
		return nil
	})
	s2 := openT(t, dir)
	regs, err := s2.Registrations()
	if err != nil {
		t.Fatal(err)
	}
	light.Version = RegistrationVersion
	want := []Registration{light, {Version: RegistrationVersion, Name: "printer", Command: "/opt/printer-adapter", Args: []string{}}}
	if !reflect.DeepEqual(regs, want) {
		t.Fatalf("Registrations after reopen = %#v, want %#v", regs, want)
	}
	existed, err := s2.DeleteRegistration("light")
	if err != nil || !existed {
		t.Fatalf("DeleteRegistration(light) = %v, %v", existed, err)
	}
	existed, err = s2.DeleteRegistration("light")
	if err != nil || existed {
		t.Fatalf("second DeleteRegistration(light) = %v, %v; want false, nil", existed, err)
	}
	regs, err = s2.Registrations()
	if err != nil || len(regs) != 1 || regs[0].Name != "printer" {
		t.Fatalf("after delete: %v, %v", regs, err)
	}
}

func TestPutRegistrationRefusesInvalid(t *testing.T) {
	s := openT(t, newDir(t))
	cases := []struct {
		name string
		reg  Registration
	}{
		{"empty name", Registration{Command: "/bin/true"}},
		{"long name", Registration{Name: strings.Repeat("n", MaxRegistrationNameBytes+1), Command: "/bin/true"}},
		{"NUL in name", Registration{Name: "a\x00b", Command: "/bin/true"}},
		{"invalid UTF-8 name", Registration{Name: "a\xffb", Command: "/bin/true"}},
		{"no command", Registration{Name: "a"}},
		{"too large", Registration{Name: "a", Command: "/bin/true", Args: []string{strings.Repeat("x", MaxRegistrationBytes)}}},
		{"passEnv with a value", Registration{Name: "a", Command: "/bin/true", PassEnv: []string{"TOKEN=hunter2"}}},
		{"passEnv empty name", Registration{Name: "a", Command: "/bin/true", PassEnv: []string{""}}},
		{"passEnv 17 names", Registration{Name: "a", Command: "/bin/true", PassEnv: strings.Split("a b c d e f g h i j k l m n o p q", " ")}},
		{"passEnv long name", Registration{Name: "a", Command: "/bin/true", PassEnv: []string{strings.Repeat("A", 65)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, s.PutRegistration(tc.reg), protocol.CodeCatalogUpdate)
		})
	}
	if regs, err := s.Registrations(); err != nil || len(regs) != 0 {
		t.Fatalf("refused registrations were stored: %v, %v", regs, err)
	}
}

func TestRegistrationsBounded(t *testing.T) {
	s := openT(t, newDir(t))
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRegistrations)
		for i := range MaxRegistrations {
			name := "a" + strings.Repeat("0", 3-len(itoa(i))) + itoa(i)
			if err := b.Put([]byte(name), []byte(`{"version":2,"name":"`+name+`","command":"/bin/true","args":[]}`)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.PutRegistration(Registration{Name: "one-more", Command: "/bin/true"}), protocol.CodeCatalogUpdate)
	// Replacing an existing one is still allowed when full.
	if err := s.PutRegistration(Registration{Name: "a000", Command: "/bin/false"}); err != nil {
		t.Fatal(err)
	}
	if regs, err := s.Registrations(); err != nil || len(regs) != MaxRegistrations {
		t.Fatalf("Registrations = %d, %v", len(regs), err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// Stored registrations that fail strict decoding are corrupt_state errors naming the adapter,
// never quoting the stored value.
func TestRegistrationsCorrupt(t *testing.T) {
	cases := []struct {
		name string
		raw  string
	}{
		{"not JSON", `{"name":`},
		{"version 1", `{"name":"x","command":"/bin/true","args":[]}`},
		{"version 3", `{"version":3,"name":"x","command":"/bin/true","args":[]}`},
		{"short digest", `{"version":2,"name":"x","command":"/bin/true","args":[],"digests":[{"role":"executable","path":"/bin/true","sha256":"abc"}]}`},
		{"unknown role", `{"version":2,"name":"x","command":"/bin/true","args":[],"digests":[{"role":"config","path":"/c","sha256":"` + strings.Repeat("0", 64) + `"}]}`},
		{"unknown field", `{"version":2,"name":"x","command":"/bin/true","args":[],"env":{"TOKEN":"hunter2"}}`},
		{"duplicate key", `{"version":2,"name":"x","name":"x","command":"/bin/true","args":[]}`},
		{"case variant", `{"version":2,"Name":"x","command":"/bin/true","args":[]}`},
		{"null args", `{"version":2,"name":"x","command":"/bin/true","args":null}`},
		{"missing args", `{"version":2,"name":"x","command":"/bin/true"}`},
		{"missing command", `{"version":2,"name":"x","args":[]}`},
		{"other name", `{"version":2,"name":"y","command":"/bin/true","args":[]}`},
		{"too large", `{"version":2,"name":"x","command":"/bin/true","args":["` + strings.Repeat("a", MaxRegistrationBytes) + `"]}`},
		{"passEnv with a value", `{"version":2,"name":"x","command":"/bin/true","args":[],"passEnv":["TOKEN=hunter2"]}`},
		{"passEnv not names", `{"version":2,"name":"x","command":"/bin/true","args":[],"passEnv":{"TOKEN":"hunter2"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := newDir(t)
			s := openT(t, dir)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawUpdate(t, s.Path(), func(tx *bolt.Tx) error {
				return tx.Bucket(bucketRegistrations).Put([]byte("x"), []byte(tc.raw))
			})
			s2 := openT(t, dir)
			_, err := s2.Registrations()
			pe := wantCode(t, err, protocol.CodeCorruptState)
			if !strings.Contains(pe.Message, `"x"`) {
				t.Errorf("message %q does not name the registration", pe.Message)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error quotes the stored value: %v", err)
			}
		})
	}
}

// A temporary registration keeps its tie, lease, digests, capability ids and passed variable
// names across a reopen.
func TestTemporaryRegistrationRoundTrip(t *testing.T) {
	dir := newDir(t)
	s := openT(t, dir)
	sum := strings.Repeat("ab", 32)
	r := Registration{Name: "tmp", Command: "/usr/bin/python3", Args: []string{"/w/light.py"}, Session: "s1", Generation: 3,
		LeaseExpires: time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC),
		Digests:      []FileDigest{{Role: "executable", Path: "/usr/bin/python3", SHA256: sum}, {Role: "script", Path: "/w/light.py", SHA256: sum}},
		Capabilities: []string{"living_room_light"}, PassEnv: []string{"CUPS_SERVER", "http_proxy"}}
	if err := s.PutRegistration(r); err != nil {
		t.Fatal(err)
	}
	bad := r
	bad.Name, bad.Digests = "bad", []FileDigest{{Role: "script", Path: "/x", SHA256: "XYZ"}}
	if err := s.PutRegistration(bad); err == nil {
		t.Fatal("a registration with an invalid digest was stored")
	}
	bad = r
	bad.Name, bad.Capabilities = "bad", strings.Split("a b c d e f g h i", " ")
	if err := s.PutRegistration(bad); err == nil {
		t.Fatal("a registration recording 9 capabilities was stored")
	}
	s.Close()
	s2 := openT(t, dir)
	regs, err := s2.Registrations()
	r.Version = RegistrationVersion
	if err != nil || len(regs) != 1 || !reflect.DeepEqual(regs[0], r) {
		t.Fatalf("Registrations = %#v, %v; want %#v", regs, err, r)
	}
}
