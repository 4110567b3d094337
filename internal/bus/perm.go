package bus

import (
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// RoomScheme is the subject and bucket layout of the room layer, as data: the broker
// permissions of a host follow from it and from the rooms the host is a member of, without any
// room logic here. DefaultRoomScheme is the layout package room uses; a test holds them equal.
type RoomScheme struct {
	// CallPrefix starts every call subject, "<prefix>.<room>.call.<provider>", and every
	// join request, "<prefix>.<room>.join.<owner>".
	CallPrefix string
	// RoomsBucket holds, per room, "<room>.roster", "<room>.projection.<host>" and
	// "<room>.key.<host>".
	RoomsBucket string
	// PresenceBucket holds "<room>.<host>".
	PresenceBucket string
	// CatalogBucket holds "<room>.<host>": each provider's catalog of each room.
	CatalogBucket string
}

// DefaultRoomScheme is the room layer's layout (room.CallSubject, room.RoomsBucket,
// room.PresenceBucket, room.CatalogBucket, and package roomhost's join subject).
var DefaultRoomScheme = RoomScheme{CallPrefix: "airlock.room", RoomsBucket: "airlock_rooms",
	PresenceBucket: "airlock_presence", CatalogBucket: "airlock_room_catalogs"}

// buckets are the scheme's key/value buckets; every key of each starts with its room.
func (s RoomScheme) buckets() []string {
	return []string{s.RoomsBucket, s.PresenceBucket, s.CatalogBucket}
}

// InboxPrefix is the reply-subject prefix of host's connections. Broker permissions let a host
// subscribe below its own prefix only, so no other host can receive its replies.
func InboxPrefix(host string) string { return "_INBOX." + host }

// responseTTL bounds how long a provider may answer a request it received: the room layer's
// longest call deadline (room.MaxCallTimeout, 70 s: a call to an approve-each publication
// waits up to a minute for the provider's operator) with a margin. It was 15 s, after the 10 s
// of a plain call, and the broker dropped the reply to a call the operator approved after
// 15 s: the action ran, and the caller was told timeout (retryable) at its deadline
// (TestResponseTTLCoversTheLongestCall).
const responseTTL = 75 * time.Second

// responseMsgs is how many messages a host may send to a request's reply subject: its answer
// and, before a late answer, its re-arm (Conn.respondMsg). The broker counts a re-arm's
// delivery as one use of the permission when the permission is still there, and records it
// anew when a reload forgot it, so that the answer after it is the second use, or the first.
const responseMsgs = 2

// Membership is one room a host is a member of; Owner marks the room's owner, the only host
// that writes its roster.
type Membership struct {
	Room  string
	Owner bool
}

// HostPermissions is the broker permission set of host, a member of rooms, under scheme:
//
//   - subscribe: its own inbox (InboxPrefix), its own provider subject
//     "<call prefix>.*.call.<host>" and the join requests to the rooms it owns
//     "<call prefix>.*.join.<host>";
//   - publish: calls into its rooms ("<call prefix>.<room>.call.*"); join requests to any
//     room's owner ("<call prefix>.*.join.*": a host joins a room it is not a member of yet,
//     and the owner checks the join code); in the rooms bucket its own projection and key
//     record per room, and the roster of a room it owns; its own presence and catalog per
//     room; replies to requests it received (two each, within responseTTL), and its own
//     inbox's re-arm subject (Conn.respondMsg), which reaches only itself;
//   - JetStream: the account info, the buckets' stream info and creation (not their update
//     or deletion), direct reads and watches of its rooms' keys only, and the flow control of
//     its watches.
//
// A host with no rooms can still open the buckets, read nothing in them, and ask to join. The permissions are
// defence in depth: the provider's verification of every call stays the authority.
func HostPermissions(scheme RoomScheme, host string, rooms []Membership) *server.Permissions {
	pub := []string{"$JS.API.INFO", scheme.CallPrefix + ".*.join.*", InboxPrefix(host) + "." + RearmToken}
	sub := []string{InboxPrefix(host) + ".>", scheme.CallPrefix + ".*.call." + host, scheme.CallPrefix + ".*.join." + host}
	for _, b := range scheme.buckets() {
		stream := "KV_" + b
		pub = append(pub,
			"$JS.API.STREAM.INFO."+stream,
			"$JS.API.STREAM.CREATE."+stream,
			"$JS.API.CONSUMER.INFO."+stream+".*",
			"$JS.API.CONSUMER.DELETE."+stream+".*",
			"$JS.FC."+stream+".>",
		)
	}
	for _, m := range rooms {
		r := m.Room
		rooms, presence := "$KV."+scheme.RoomsBucket+"."+r, "$KV."+scheme.PresenceBucket+"."+r
		pub = append(pub,
			scheme.CallPrefix+"."+r+".call.*",
			rooms+".projection."+host,
			rooms+".key."+host,
			presence+"."+host,
			"$KV."+scheme.CatalogBucket+"."+r+"."+host,
		)
		if m.Owner {
			pub = append(pub, rooms+".roster")
		}
		for _, b := range scheme.buckets() {
			stream, keys := "KV_"+b, "$KV."+b+"."+r+".>"
			pub = append(pub,
				"$JS.API.DIRECT.GET."+stream+"."+keys,
				"$JS.API.CONSUMER.CREATE."+stream+".*."+keys,
			)
		}
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: sub},
		Response:  &server.ResponsePermission{MaxMsgs: responseMsgs, Expires: responseTTL},
	}
}

// withDomain adds, for every JetStream API and bucket subject perms allows, the same subject
// under domain ($JS.<domain>.API.…), which is how a leaf node's hosts reach the hub's
// JetStream.
// The broker checks permissions on the subject as sent, before it maps the domain away.
func withDomain(perms *server.Permissions, domain string) *server.Permissions {
	var add []string
	for _, s := range perms.Publish.Allow {
		if rest, ok := strings.CutPrefix(s, "$JS.API."); ok {
			add = append(add, "$JS."+domain+".API."+rest)
		}
		// Under a domain, nats.go sends a bucket's writes under the API prefix too.
		if strings.HasPrefix(s, "$KV.") {
			add = append(add, "$JS."+domain+".API."+s)
		}
	}
	perms.Publish.Allow = append(perms.Publish.Allow, add...)
	return perms
}
