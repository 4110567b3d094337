package protocol

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// FuzzRoomPayloads decodes one payload as every room operation's payload: the only refusal is
// invalid_field, and whatever is accepted holds the grammars and bounds the room service
// relies on.
func FuzzRoomPayloads(f *testing.F) {
	host := string(bytes.Repeat([]byte("ab"), 32))
	f.Add([]byte(`{"room":"home","title":"Home"}`))
	f.Add([]byte(`{"room":"home","provider":"` + host + `","capabilityId":"desk_lamp","action":"set_power","args":{"on":true}}`))
	f.Add([]byte(`{"room":"home","capabilityId":"desk_lamp","actions":["set_power"],"members":["` + host + `"],"observe":true}`))
	f.Add([]byte(`{"approvalId":"0123456789abcdef01234567","approve":true}`))
	f.Add([]byte(`{"approvalId":"0123456789abcdef01234567","approve":true,"remember":true,"pattern":"src/**"}`))
	f.Add([]byte(`{"approvalId":"0123456789abcdef01234567","approve":false,"remember":true,"anyArgs":true}`))
	f.Add([]byte(`{"memoryId":"0123456789abcdef01234567"}`))
	f.Add([]byte(`{"code":"ajc1.home.x.y"}`))
	f.Add([]byte(`{"hostId":"` + host + `","nkey":"UBD4IDB5L5HWQWZYSG7NQIWDPS2EGW6JQWWXL4JJ26SJUOX2ZAJEKJYV","rooms":[{"room":"home","owner":true}]}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		cmd := &Command{Version: Version{Major: 2, Raw: "2.0"}, Payload: payload}
		check := func(e *Error) {
			if e != nil && e.Code != CodeInvalidField {
				t.Fatalf("refused with %s", e.Code)
			}
		}
		okRoom := func(id string) {
			if !roomIDPattern.MatchString(id) {
				t.Fatalf("accepted room %q", id)
			}
		}
		var rp RoomPayload
		if e := DecodePayload(cmd, &rp); e == nil {
			if e = rp.Validate(); e == nil {
				okRoom(rp.Room)
			}
			check(e)
		}
		var cp CreateRoomPayload
		if e := DecodePayload(cmd, &cp); e == nil {
			if e = cp.Validate(); e == nil {
				okRoom(cp.Room)
				if len(cp.Title) > MaxRoomTitleBytes {
					t.Fatalf("accepted a title of %d bytes", len(cp.Title))
				}
			}
			check(e)
		}
		var pp PublishCapabilityPayload
		if e := DecodePayload(cmd, &pp); e == nil {
			if e = pp.Validate(); e == nil {
				okRoom(pp.Room)
				for _, m := range pp.Members {
					if !hostIDPattern.MatchString(m) {
						t.Fatalf("accepted member %q", m)
					}
				}
				for _, a := range pp.Actions {
					if !actionNamePattern.MatchString(a) {
						t.Fatalf("accepted action %q", a)
					}
				}
			}
			check(e)
		}
		for _, invoke := range []bool{false, true} {
			var call RoomCallPayload
			if e := DecodePayload(cmd, &call); e == nil {
				if e = call.Validate(invoke); e == nil {
					okRoom(call.Room)
					if !hostIDPattern.MatchString(call.Provider) || !capabilityIDPattern.MatchString(call.CapabilityID) {
						t.Fatalf("accepted %+v", call)
					}
					if !invoke && (call.Action != "" || call.Args != nil) {
						t.Fatalf("accepted an observe with %q %s", call.Action, call.Args)
					}
					if invoke && (!actionNamePattern.MatchString(call.Action) || len(call.Args) > MaxRoomArgsBytes) {
						t.Fatalf("accepted an invoke %q with %d bytes of args", call.Action, len(call.Args))
					}
				}
				check(e)
			}
		}
		var dp DecideApprovalPayload
		if e := DecodePayload(cmd, &dp); e == nil {
			if e = dp.Validate(); e == nil && (dp.Approve == nil || !approvalIDPattern.MatchString(dp.ApprovalID) ||
				(dp.Remember && !*dp.Approve) || ((dp.Pattern != "" || dp.AnyArgs) && !dp.Remember) ||
				(dp.Pattern != "" && dp.AnyArgs) || len(dp.Pattern) > MaxApprovalPatternBytes || !utf8.ValidString(dp.Pattern)) {
				t.Fatalf("accepted %+v", dp)
			}
			check(e)
		}
		var fp ForgetApprovalPayload
		if e := DecodePayload(cmd, &fp); e == nil {
			if e = fp.Validate(); e == nil && !approvalIDPattern.MatchString(fp.MemoryID) {
				t.Fatalf("accepted %+v", fp)
			}
			check(e)
		}
		var ap AdmitBusHostPayload
		if e := DecodePayload(cmd, &ap); e == nil {
			if e = ap.Validate(); e == nil {
				if !hostIDPattern.MatchString(ap.HostID) || !nkeyPattern.MatchString(ap.Nkey) || len(ap.Rooms) > MaxBusHostRooms {
					t.Fatalf("accepted %+v", ap)
				}
				for _, r := range ap.Rooms {
					okRoom(r.Room)
				}
			}
			check(e)
		}
		var bp BusHostPayload
		if e := DecodePayload(cmd, &bp); e == nil {
			if e = bp.Validate(); e == nil && !hostIDPattern.MatchString(bp.HostID) {
				t.Fatalf("accepted host %q", bp.HostID)
			}
			check(e)
		}
		var jp JoinRoomPayload
		if e := DecodePayload(cmd, &jp); e == nil {
			if e = jp.Validate(); e == nil && (jp.Code == "" || len(jp.Code) > MaxJoinCodeLen) {
				t.Fatalf("accepted code of %d bytes", len(jp.Code))
			}
			check(e)
		}
	})
}
