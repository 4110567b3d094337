package protocol

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzTurnPayloads feeds one payload to each agent-turn operation: decoding and validation
// either refuse it with invalid_field or accept a payload inside its bounds, and the identities
// derived from an accepted wake are well formed and stable.
func FuzzTurnPayloads(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hi"}`, `{"prompt":"hi","source":"cron","waitForTerminal":false}`, `{"prompt":""}`,
		`{"message":"faster"}`, `{"ticketId":"` + TicketID("s", "k") + `","outcome":"failed"}`,
		`{"prompt":"a","Prompt":"b"}`, `{"prompt":"\u0000"}`, `{"ticketId":"ticket-"}`, `[]`, `null`,
	} {
		f.Add([]byte(s), "session", "key")
	}
	f.Fuzz(func(t *testing.T, payload []byte, session, key string) {
		cmd := &Command{Payload: payload}
		check := func(op string, e *Error) {
			if e != nil && e.Code != CodeInvalidField {
				t.Fatalf("%s: code %s", op, e.Code)
			}
		}
		var w WakePayload
		e := DecodePayload(cmd, &w)
		if e == nil {
			e = w.Validate()
		}
		check("wake", e)
		if e == nil {
			if w.Prompt == "" || utf8.RuneCountInString(w.Prompt) > MaxPromptChars {
				t.Fatalf("accepted prompt of %d characters", utf8.RuneCountInString(w.Prompt))
			}
			fp := WakeFingerprint(session, 1, key, &w)
			if len(fp) != 64 || fp != WakeFingerprint(session, 1, key, &w) {
				t.Fatalf("fingerprint %q", fp)
			}
			wait := !w.Wait()
			w.WaitForTerminal = &wait
			if WakeFingerprint(session, 1, key, &w) != fp {
				t.Fatal("waitForTerminal changed the fingerprint")
			}
		}
		var m MessagePayload
		if e := DecodePayload(cmd, &m); e == nil {
			check("steer", m.Validate())
		} else {
			check("steer", e)
		}
		var r ReconcilePayload
		e = DecodePayload(cmd, &r)
		if e == nil {
			e = r.Validate()
		}
		check("reconcile", e)
		if e == nil {
			rest, ok := strings.CutPrefix(r.TicketID, "ticket-")
			if _, err := base64.RawURLEncoding.DecodeString(rest + "A"); !ok || len(rest) != 43 || err != nil {
				t.Fatalf("accepted ticket id %q", r.TicketID)
			}
		}
		id := TicketID(session, key)
		if (&TicketPayload{TicketID: id}).Validate() != nil {
			t.Fatalf("TicketID made %q, which ticket refuses", id)
		}
	})
}
