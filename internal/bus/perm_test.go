package bus

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/room"
)

// TestHostPermissions pins the permission set of a member, an owner and a host with no room,
// and the domain variants a leaf node's host needs.
func TestHostPermissions(t *testing.T) {
	p := HostPermissions(DefaultRoomScheme, hostA, []Membership{{Room: "living", Owner: true}, {Room: "kitchen"}})
	pub, sub := p.Publish.Allow, p.Subscribe.Allow
	for _, want := range []string{
		"airlock.room.living.call.*", "airlock.room.kitchen.call.*",
		"$KV.airlock_rooms.living.roster", "$KV.airlock_rooms.living.key." + hostA, "$KV.airlock_rooms.kitchen.projection." + hostA,
		"$KV.airlock_presence.kitchen." + hostA, "$KV.airlock_room_catalogs.living." + hostA,
		"$JS.API.DIRECT.GET.KV_airlock_room_catalogs.$KV.airlock_room_catalogs.kitchen.>",
		"$JS.API.STREAM.INFO.KV_airlock_room_catalogs", "airlock.room.*.join.*",
		"$JS.API.DIRECT.GET.KV_airlock_rooms.$KV.airlock_rooms.kitchen.>",
		"$JS.API.CONSUMER.CREATE.KV_airlock_presence.*.$KV.airlock_presence.living.>",
		"$JS.API.STREAM.INFO.KV_airlock_rooms", "$JS.API.STREAM.CREATE.KV_airlock_presence",
	} {
		if !slices.Contains(pub, want) {
			t.Errorf("publish lacks %s", want)
		}
	}
	for _, never := range []string{
		"$KV.airlock_rooms.kitchen.roster",             // not its room to own
		"$KV.airlock_room_catalogs.living.*",           // not another host's catalog
		"$JS.API.STREAM.UPDATE.KV_airlock_rooms",       // no reconfiguring the buckets
		"$JS.API.STREAM.DELETE.KV_airlock_rooms",       // nor deleting them
		"$JS.API.CONSUMER.CREATE.KV_airlock_rooms.*",   // no unfiltered watch
		"$JS.API.STREAM.MSG.GET.KV_airlock_rooms",      // no unfiltered read
		"airlock.room.*.call.*", "airlock.room.>", ">", // no wildcard calls
	} {
		if slices.Contains(pub, never) {
			t.Errorf("publish allows %s", never)
		}
	}
	for _, s := range pub {
		// Its own re-arm subject is the one inbox subject it publishes to, and only it reads it.
		if strings.Contains(s, "_INBOX") && s != "_INBOX."+hostA+"."+RearmToken {
			t.Errorf("publish allows an inbox: %s (replies go by the response permission)", s)
		}
	}
	if !slices.Equal(sub, []string{"_INBOX." + hostA + ".>", "airlock.room.*.call." + hostA, "airlock.room.*.join." + hostA}) {
		t.Errorf("subscribe: %v", sub)
	}
	if p.Response == nil || p.Response.MaxMsgs != responseMsgs || p.Response.Expires != responseTTL {
		t.Errorf("responses: %+v", p.Response)
	}

	none := HostPermissions(DefaultRoomScheme, hostB, nil)
	for _, s := range none.Publish.Allow {
		if s == "airlock.room.*.join.*" {
			continue // asking an owner to join: the join code is the authority
		}
		if strings.Contains(s, "airlock.room.") || strings.HasPrefix(s, "$KV.") || strings.Contains(s, "DIRECT.GET") {
			t.Errorf("a host with no room may publish %s", s)
		}
	}

	d := withDomain(HostPermissions(DefaultRoomScheme, hostA, []Membership{{Room: "living"}}), "home")
	for _, want := range []string{"$JS.home.API.INFO", "$JS.home.API.$KV.airlock_rooms.living.key." + hostA,
		"$JS.home.API.DIRECT.GET.KV_airlock_rooms.$KV.airlock_rooms.living.>", "$JS.API.INFO"} {
		if !slices.Contains(d.Publish.Allow, want) {
			t.Errorf("with a domain, publish lacks %s", want)
		}
	}
}

// A provider may answer within the longest deadline a caller may declare: a call that waited
// for the provider's operator is answered up to room.MaxCallTimeout after it was sent.
func TestResponseTTLCoversTheLongestCall(t *testing.T) {
	p := HostPermissions(DefaultRoomScheme, hostA, []Membership{{Room: "living"}})
	if p.Response == nil || p.Response.Expires < room.MaxCallTimeout {
		t.Fatalf("replies are allowed for %v after a request; a call may wait %v", p.Response.Expires, room.MaxCallTimeout)
	}
}
