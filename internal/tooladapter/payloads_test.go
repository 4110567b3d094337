package tooladapter

import (
	"math/rand/v2"
	"regexp"
	"testing"
)

// modifiedAtPattern is the schema's pattern, the reference for validModifiedAt.
var modifiedAtPattern = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$`)

func TestValidModifiedAt(t *testing.T) {
	base := "2026-12-02T13:00:00.123456789Z"
	cases := []string{base, "2026-12-02T13:00:00Z", "2026-12-02T13:00:00.Z", "2026-12-02T13:00:00.1234567890Z",
		"2026-12-02T13:00:00.1Z\n", "2026-12-02 13:00:00Z", "", "Z", "2026-12-02T13:00:00z", "٢٠٢٦-12-02T13:00:00Z"}
	r := rand.New(rand.NewPCG(9, 10))
	const alphabet = "0123456789-T:.Z x\n"
	for range 100000 {
		b := []byte(base[:19+r.IntN(12)])
		if r.IntN(3) > 0 {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		if r.IntN(2) == 0 {
			b = append(b, 'Z')
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := validModifiedAt(s), modifiedAtPattern.MatchString(s); got != want {
			t.Fatalf("validModifiedAt(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
