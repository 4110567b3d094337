// Package store keeps airlockd's durable state in one embedded bbolt database: the session
// catalog, the secret-free session manifests, the capability adapter registrations, the
// wake journal, the rooms this host is in with its publications into them, and the call floor
// leases of its room provider.
//
// The database is <state dir>/airlock.db. The state directory must be a real directory (not a
// symbolic link) owned by the effective uid with no group or other permission bits, and the
// file a regular file with the same owner and no group or other bits; Open refuses anything
// else with insecure_state_path rather than repairing it. bbolt holds an exclusive flock on
// the file while it is open, so a second airlockd on the same state directory fails with
// state_locked after Options.LockTimeout.
//
// # Schema
//
// Every value is either decimal or RFC 3339 text (meta) or one JSON object (catalog,
// manifests) keyed by the UTF-8 bytes of its session id, (registrations) of its adapter name,
// or (journal) of its seq as 8 bytes big-endian inside a bucket named by its session id:
//
//	meta/                       written once at creation; schemaVersion by every migration
//	  format        = "airlock-state"
//	  schemaVersion = "7"       decimal; the version of the last applied migration
//	  createdAt     = RFC 3339 time of creation
//	catalog/                    since schema 1
//	  <sessionId>   = protocol.CatalogRecord as JSON
//	manifests/                  since schema 1
//	  <sessionId>   = Manifest as JSON
//	registrations/              since schema 2; records rewritten as version 2 by schema 4
//	  <name>        = Registration as JSON: {version: 2, name, command, args, room?,
//	                  session?, generation?, leaseExpires?, digests?: [{role, path, sha256}],
//	                  capabilities?: [capabilityId], passEnv?: [variable name]}
//	                  (capabilities recorded since schema 5; passEnv, names only, never
//	                  values, since the same schema: a record without it passes nothing)
//	                  (version 1, schemas 2 and 3: {name, command, args} only)
//	journal/                    since schema 3
//	  <sessionId>/              one bucket per session; its bbolt sequence is the last seq handed out
//	    <seq>       = JournalEntry as JSON; key 8 bytes big-endian
//	rooms/                      since schema 5
//	  <roomId>      = RoomRecord as JSON: the room, its trusted owner and (owner only) its roster
//	publications/               since schema 5
//	  <roomId>/<capabilityId> = PublicationRecord as JSON
//	callFloors/                 since schema 6
//	  <callerHostId> = the caller's floor lease: decimal milliseconds since 1970
//	bus_hosts/                  since schema 7
//	  <hostId>      = BusHostRecord as JSON: another host admitted to this host's embedded bus
//
// A file bbolt cannot open, a bbolt file without meta/format = "airlock-state" and a file whose
// schemaVersion is newer than this build are refused with corrupt_state; the store never resets
// or overwrites a file it does not understand. A bbolt file with no buckets at all holds no
// data and is initialized as new, so a crash between bbolt creating the file and the first
// commit does not strand the state directory.
//
// Records are decoded strictly whenever they are read. A catalog record, manifest or
// registration that fails is reported as corrupt_state, a journal entry as corrupt_journal. A
// journal entry that does not decode is never overwritten.
//
// # Transactions
//
// Every state change is one bbolt Update, which bbolt fsyncs before it returns; reads are one
// View each. Journal writes (AppendJournal, UpdateJournal) and call floor raises
// (RaiseCallFloor) are group-committed: concurrent writes share one Update, and so one fsync,
// and each returns once that Update has committed (groupcommit.go). All methods of a Store
// are safe for concurrent use.
package store
