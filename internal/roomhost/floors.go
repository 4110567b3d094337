package roomhost

import (
	"log/slog"
	"time"

	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// floors is the provider's room.Floors on the state database's callFloors bucket, where
// concurrent raises share one commit.
type floors struct {
	store *store.Store
	log   *slog.Logger
}

func (f floors) Load(since time.Time) (map[room.HostID]time.Time, error) {
	stored, err := f.store.CallFloors(since)
	if err != nil {
		return nil, err
	}
	leases := make(map[room.HostID]time.Time, len(stored))
	for id, l := range stored {
		leases[room.HostID(id)] = l
	}
	return leases, nil
}

// Raise logs each durable raise at debug level (at most about one per caller per
// room.FloorStep), and a failed one as a warning: the caller's calls are then refused
// unavailable.
func (f floors) Raise(caller room.HostID, lease, since time.Time) error {
	if err := f.store.RaiseCallFloor(string(caller), lease, since); err != nil {
		f.log.Warn("room call floor not raised: the caller's call is refused unavailable", "caller", caller, "err", err)
		return err
	}
	f.log.Debug("room call floor raised", "caller", caller, "lease", lease.UTC())
	return nil
}
