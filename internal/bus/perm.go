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
	// CallPrefix starts every call subject: "<prefix>.<room>.call.<provider>".
	CallPrefix string
	// RoomsBucket holds, per room, "<room>.roster", "<room>.projection.<host>" and
	// "<room>.key.<host>".
	RoomsBucket string
	// PresenceBucket holds "<room>.<host>".
	PresenceBucket string
}

// DefaultRoomScheme is package room's layout (room.CallSubject, room.RoomsBucket,
// room.PresenceBucket).
var DefaultRoomScheme = RoomScheme{CallPrefix: "airlock.room", RoomsBucket: "airlock_rooms", PresenceBucket: "airlock_presence"}

// InboxPrefix is the reply-subject prefix of host's connections. Broker permissions let a host
// subscribe below its own prefix only, so no other host can receive its replies.
func InboxPrefix(host string) string { return "_INBOX." + host }

// responseTTL bounds how long a provider may answer a request it received: the room layer's
// call deadline (10 s) with a margin.
const responseTTL = 15 * time.Second

// Membership is one room a host is a member of; Owner marks the room's owner, the only host
// that writes its roster.
type Membership struct {
	Room  string
	Owner bool
}

// HostPermissions is the broker permission set of host, a member of rooms, under scheme:
//
//   - subscribe: its own inbox (InboxPrefix) and its own provider subject
//     "<call prefix>.*.call.<host>";
//   - publish: calls into its rooms ("<call prefix>.<room>.call.*"); in the rooms bucket its
//     own projection and key record per room, and the roster of a room it owns; its own
//     presence per room; replies to requests it received (one each, within responseTTL);
//   - JetStream: the account info, the two buckets' stream info and creation (not their
//     update or deletion), direct reads and watches of its rooms' keys only, and the flow
//     control of its watches.
//
// A host with no rooms can still open the buckets and read nothing in them. The permissions are
// defence in depth: the provider's verification of every call stays the authority.
func HostPermissions(scheme RoomScheme, host string, rooms []Membership) *server.Permissions {
	pub := []string{"$JS.API.INFO"}
	sub := []string{InboxPrefix(host) + ".>", scheme.CallPrefix + ".*.call." + host}
	for _, b := range []string{scheme.RoomsBucket, scheme.PresenceBucket} {
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
		)
		if m.Owner {
			pub = append(pub, rooms+".roster")
		}
		for _, b := range []string{scheme.RoomsBucket, scheme.PresenceBucket} {
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
		Response:  &server.ResponsePermission{MaxMsgs: 1, Expires: responseTTL},
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
