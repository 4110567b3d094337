package store

import (
	"reflect"
	"strings"
	"testing"

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
	// Only {name, command, args} is on disk.
	rawView(t, s.Path(), func(tx *bolt.Tx) error {
		got := string(tx.Bucket(bucketRegistrations).Get([]byte("printer")))
		if want := `{"name":"printer","command":"/opt/printer-adapter","args":[]}`; got != want {
			t.Errorf("stored printer = %s, want %s", got, want)
		}
		return nil
	})
	s2 := openT(t, dir)
	regs, err := s2.Registrations()
	if err != nil {
		t.Fatal(err)
	}
	want := []Registration{light, {Name: "printer", Command: "/opt/printer-adapter", Args: []string{}}}
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
			if err := b.Put([]byte(name), []byte(`{"name":"`+name+`","command":"/bin/true","args":[]}`)); err != nil {
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
		{"unknown field", `{"name":"x","command":"/bin/true","args":[],"env":{"TOKEN":"hunter2"}}`},
		{"duplicate key", `{"name":"x","name":"x","command":"/bin/true","args":[]}`},
		{"case variant", `{"Name":"x","command":"/bin/true","args":[]}`},
		{"null args", `{"name":"x","command":"/bin/true","args":null}`},
		{"missing args", `{"name":"x","command":"/bin/true"}`},
		{"missing command", `{"name":"x","args":[]}`},
		{"other name", `{"name":"y","command":"/bin/true","args":[]}`},
		{"too large", `{"name":"x","command":"/bin/true","args":["` + strings.Repeat("a", MaxRegistrationBytes) + `"]}`},
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
