package roomhost

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/room"
)

// Seeds live in testdata/fuzz/<FuzzName>; `go test` runs them, `go test -fuzz` grows them.

// FuzzParseCode: a join code is accepted only in its exact form, and what is accepted
// rebuilds the same code.
func FuzzParseCode(f *testing.F) {
	f.Add("ajc1.home." + strings.Repeat("ab", 32) + "." + base64.RawURLEncoding.EncodeToString(make([]byte, secretBytes)))
	f.Add("ajc1.home.x.y")
	f.Fuzz(func(t *testing.T, code string) {
		id, owner, secret, err := parseCode(code)
		if err != nil {
			if codeOf(err) != CodeInvalidJoinCode {
				t.Fatalf("refusal %v", err)
			}
			return
		}
		if !room.ValidRoomID(id) || !owner.Valid() || len(secret) != secretBytes {
			t.Fatalf("accepted %q as %q %q %x", code, id, owner, secret)
		}
		if again := strings.Join([]string{codePrefix, id, string(owner), base64.RawURLEncoding.EncodeToString(secret)}, "."); again != code {
			t.Fatalf("accepted %q, which rebuilds as %q", code, again)
		}
	})
}

// FuzzDecodeJoin: a join request is accepted only when strictly decoded, addressed to this
// owner on its room's subject, and signed by the host it names within the clock window; the
// refusals use the documented codes.
func FuzzDecodeJoin(f *testing.F) {
	now := time.UnixMilli(1_800_000_000_000)
	owner, joiner, req := signedJoin(f, now)
	f.Add(joinSubject("home", owner.ID()), []byte(marshal(req)))
	respelled := req
	respelled.Sig = req.Sig[:8] + "\r\n" + req.Sig[8:]
	f.Add(joinSubject("home", owner.ID()), []byte(marshal(respelled)))
	f.Add(joinSubject("home", owner.ID()), []byte(`{"room":"home"}`))
	leave := joinRequest{Room: "home", Host: joiner.ID(), Leave: true, Time: req.Time}
	leave.Sig = base64.StdEncoding.EncodeToString(joiner.Sign(joinMessage(&leave)))
	f.Add(joinSubject("home", owner.ID()), []byte(marshal(leave)))
	f.Add("airlock.room.home.join.x", []byte(`{}`))
	f.Fuzz(func(t *testing.T, subject string, payload []byte) {
		r, secret, code := decodeJoin(subject, owner.ID(), payload, now)
		if code != "" {
			switch code {
			case room.CodeInvalidRequest, room.CodeUnauthorized, CodeInvalidJoinCode:
			default:
				t.Fatalf("refused with %q", code)
			}
			if r != nil || secret != nil {
				t.Fatal("a refusal returned a request")
			}
			return
		}
		if subject != joinSubject(r.Room, owner.ID()) || (r.Leave && (secret != nil || r.Secret != "")) || (!r.Leave && len(secret) != secretBytes) {
			t.Fatalf("accepted %+v on %q", r, subject)
		}
		// One spelling of each: what was accepted is what encodes it.
		sig, _ := base64.StdEncoding.Strict().DecodeString(r.Sig)
		if base64.StdEncoding.EncodeToString(sig) != r.Sig || (!r.Leave && base64.RawURLEncoding.EncodeToString(secret) != r.Secret) {
			t.Fatalf("accepted a signature %q or a secret %q not in its canonical form", r.Sig, r.Secret)
		}
	})
}

// TestDecodeJoinRefusesOtherSpellings: a join request whose signature or secret is spelled
// with a line break inside (which encoding/base64's strict decoder skips) is refused, as
// unauthorized and as a bad join code.
func TestDecodeJoinRefusesOtherSpellings(t *testing.T) {
	now := time.Now()
	owner, joiner, req := signedJoin(t, now)
	subject := joinSubject("home", owner.ID())
	if _, _, code := decodeJoin(subject, owner.ID(), []byte(marshal(req)), now); code != "" {
		t.Fatalf("the request as signed: %s", code)
	}
	badSig := req
	badSig.Sig = req.Sig[:8] + "\r\n" + req.Sig[8:]
	if _, _, code := decodeJoin(subject, owner.ID(), []byte(marshal(badSig)), now); code != room.CodeUnauthorized {
		t.Errorf("a signature with a line break: %q, want %s", code, room.CodeUnauthorized)
	}
	badSecret := req
	badSecret.Secret = req.Secret[:8] + "\n" + req.Secret[8:]
	badSecret.Sig = base64.StdEncoding.EncodeToString(joiner.Sign(joinMessage(&badSecret)))
	if _, _, code := decodeJoin(subject, owner.ID(), []byte(marshal(badSecret)), now); code != CodeInvalidJoinCode {
		t.Errorf("a secret with a line break: %q, want %s", code, CodeInvalidJoinCode)
	}
}

// signedJoin returns an owner's and a joiner's keys and the joiner's request, signed, to join
// room "home" at now with an all-zero secret.
func signedJoin(tb testing.TB, now time.Time) (owner, joiner *room.HostKey, req joinRequest) {
	tb.Helper()
	owner, err := room.GenerateHostKey()
	if err != nil {
		tb.Fatal(err)
	}
	if joiner, err = room.GenerateHostKey(); err != nil {
		tb.Fatal(err)
	}
	req = joinRequest{Room: "home", Host: joiner.ID(), Secret: base64.RawURLEncoding.EncodeToString(make([]byte, secretBytes)), Time: now.UnixMilli()}
	req.Sig = base64.StdEncoding.EncodeToString(joiner.Sign(joinMessage(&req)))
	return owner, joiner, req
}
