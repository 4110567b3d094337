package roomhost

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/busport"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/store"
)

// Error codes of the fabric.
const (
	// CodeFabricHost: the fabric file serves another host than this daemon's host key.
	CodeFabricHost = "fabric_host"
	// CodeNoFabricStatus: this host joined another daemon's bus and runs no node to report on.
	CodeNoFabricStatus = "no_fabric_status"
)

// brokerUsers keeps this host's rooms at whoever authorizes its bus connection, so its broker
// user may touch those rooms and no others (bus.HostPermissions): its own cluster node on a
// fabric (the fabric file's users, with this host's own rooms replaced by the ones it is
// actually in, given to the node with bus.Server.SetUsers; the other users stay as the file
// lists them: a node authorizes only the clients connecting to it, and another host's daemon
// connects to its own node), its own embedded server (localBus), or the daemon whose bus it
// joined (an Admission). Every change goes out at once.
type brokerUsers struct {
	push func(rooms map[string]bool) error

	mu    sync.Mutex      // serializes changes, so the users follow the order of rooms
	rooms map[string]bool // room → this host owns it
}

// newBrokerUsers returns the users of a cluster node, or nil for a node without users of its
// own (no fabric, or a leaf node, whose hub authorizes).
func newBrokerUsers(srv *bus.Server, fb *bus.Fabric) *brokerUsers {
	if fb == nil || fb.File.Mode != bus.ModeCluster {
		return nil
	}
	file, self := fb.File.Users, fb.HostID()
	return pushUsers(func(rooms map[string]bool) error {
		users := make([]bus.FabricUser, 0, len(file))
		for _, f := range file {
			if f.Host == self {
				f.Rooms, f.Owns = roomLists(rooms)
			}
			users = append(users, f)
		}
		return srv.SetUsers(users)
	})
}

// pushUsers returns users that push every change of this host's rooms with push.
func pushUsers(push func(rooms map[string]bool) error) *brokerUsers {
	return &brokerUsers{push: push, rooms: make(map[string]bool)}
}

// roomLists turns rooms (room → owner) into a fabric user's sorted rooms and owns.
func roomLists(rooms map[string]bool) (all, owns []string) {
	for _, id := range slices.Sorted(maps.Keys(rooms)) {
		all = append(all, id)
		if rooms[id] {
			owns = append(owns, id)
		}
	}
	return all, owns
}

// set sets this host's rooms to rooms (room → owner) on the node.
func (u *brokerUsers) set(rooms map[string]bool) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rooms = rooms
	return u.apply()
}

// permit adds room to this host's rooms on the node, owned or not, before the host touches
// it on the bus.
func (u *brokerUsers) permit(id string, owner bool) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if o, ok := u.rooms[id]; ok && o == owner {
		return nil
	}
	u.rooms[id] = owner
	return u.apply()
}

// revoke drops room from this host's rooms on the node, after the host left it.
func (u *brokerUsers) revoke(id string) error {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.rooms[id]; !ok {
		return nil
	}
	delete(u.rooms, id)
	return u.apply()
}

// apply sends a copy of the rooms out; u.mu is held.
func (u *brokerUsers) apply() error {
	return u.push(maps.Clone(u.rooms))
}

// FabricStatus is the status of this host's embedded node: the fabric node's routes, leaves
// and JetStream health, or the single local node without a fabric. A host on another
// daemon's bus has no node (CodeNoFabricStatus).
func (s *Service) FabricStatus() (bus.FabricStatus, error) {
	if s.server == nil {
		return bus.FabricStatus{}, errorf(CodeNoFabricStatus, "this host uses another daemon's bus; ask that daemon")
	}
	st, err := s.server.Status()
	if err != nil {
		return bus.FabricStatus{}, &Error{code: room.CodeInternal, msg: "the node's monitoring did not answer", cause: err}
	}
	return st, nil
}

// unpermit revokes room id at the fabric node when this host did not get into it.
func (s *Service) unpermit(id string) {
	if err := s.users.revoke(id); err != nil {
		s.log.Error("room permissions not revoked at the fabric node", "room", id, "err", err)
	}
}

// storedRooms are the rooms the store says this host is in (room → owner), for its user's
// permissions at start; an unreadable store gives none (restore then reports it).
func storedRooms(st *store.Store, self room.HostID) map[string]bool {
	recs, err := st.Rooms()
	out := make(map[string]bool, len(recs))
	if err != nil {
		return out
	}
	for _, r := range recs {
		out[r.ID] = room.HostID(r.Owner) == self
	}
	return out
}

// fabricPoll is how often waitFabric looks at the node, and fabricLogEvery how often it says
// that it still waits.
const (
	fabricPoll     = 100 * time.Millisecond
	fabricLogEvery = 10 * time.Second
)

// waitFabric waits until this host's node can serve JetStream: a cluster node has a meta
// leader (a quorum of the cluster's nodes is up), a leaf node is connected to its hub. A
// JetStream request sent before gets no answer at all, so the buckets are opened after.
func (s *Service) waitFabric(ctx context.Context) error {
	start, logged := time.Now(), time.Now()
	for {
		st, err := s.server.Status()
		if err == nil && ((st.Mode == bus.ModeCluster && st.JetStream.Leader != "") ||
			(st.Mode == bus.ModeLeaf && slices.ContainsFunc(st.Leaves, func(l bus.LeafStatus) bool { return l.Hub }))) {
			if time.Since(start) > fabricLogEvery {
				s.log.Info("fabric ready", "node", st.Node, "waited", time.Since(start).Round(time.Second))
			}
			return nil
		}
		if time.Since(logged) >= fabricLogEvery {
			logged = time.Now()
			s.log.Warn("waiting for the fabric: no JetStream leader (cluster) or hub (leaf) yet", "node", st.Node, "routes", len(st.Routes))
		}
		select {
		case <-ctx.Done():
			return errorf(room.CodeUnavailable, "the fabric did not form: no JetStream leader or hub")
		case <-time.After(fabricPoll):
		}
	}
}

// busAttempt bounds one attempt of retryBus; formingWait is its pause after an answer that
// the cluster is still forming.
const (
	busAttempt  = 5 * time.Second
	formingWait = 250 * time.Millisecond
)

// retryBus runs fn with attempts of busAttempt each until it succeeds, fails otherwise than
// by a fabric still forming, or ctx ends. A JetStream request that a node receives while its
// cluster elects a leader gets no answer at all, or "temporarily unavailable"; a bucket with
// more replicas than nodes up gets "no suitable peers"; a write to a stream whose replicas
// lost their quorum (a two-node cluster while one node restarts) finds no responders. On a
// leaf node, the leaf's connection to its hub is up a moment before the leaf learns the
// hub's subscriptions, the JetStream API's among them: a request meanwhile finds no
// responders too. The next attempt, once enough nodes are up or the subscriptions arrived,
// succeeds. Without a fabric (the embedded server, --nats-url) no responders is final: that
// server has no JetStream.
//
// An attempt that met a leaderless group does not wait out busAttempt: the node's groups are
// watched while it runs (leaderWatch), and it is ended, and made again at once, when a group
// that had no leader at its start has one. A node restarted while it led a stream is the
// usual case: its peers elect a new leader after NATS's election timeout, seconds after the
// node's meta group is back, and the room service's first request meanwhile went unanswered.
func (s *Service) retryBus(ctx context.Context, fn func(context.Context) error) error {
	fabric := s.cfg.Fabric != nil
	attempt := busAttempt
	if s.cfg.busAttempt > 0 {
		attempt = s.cfg.busAttempt
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		var elected func() bool
		if fabric && s.server != nil {
			elected = s.leaderWatch(actx, cancel)
		}
		err := fn(actx)
		cancel()
		if elected != nil && elected() && err != nil && ctx.Err() == nil {
			continue // a group it met leaderless has a leader now
		}
		forming := bus.Forming(err) || (fabric && errors.Is(err, busport.ErrNoResponders))
		if err == nil || !(forming || errors.Is(err, busport.ErrTimeout)) || ctx.Err() != nil {
			return err
		}
		if forming {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(formingWait):
			}
		}
	}
}

// leaderWatch looks at the node's JetStream groups every fabricPoll until ctx ends, and calls
// cancel when one that had no leader at its start has one (or is gone). The function it
// returns waits for the watch to end (ctx must be done first) and says whether it cancelled.
func (s *Service) leaderWatch(ctx context.Context, cancel context.CancelFunc) (elected func() bool) {
	groups, err := s.server.Groups()
	var before []string
	for g, leader := range groups {
		if leader == "" {
			before = append(before, g)
		}
	}
	if err != nil || len(before) == 0 {
		return func() bool { return false }
	}
	var fired bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(fabricPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now, err := s.server.Groups()
			if err != nil {
				continue
			}
			for _, g := range before {
				if leader, ok := now[g]; leader != "" || !ok {
					fired = true
					s.log.Debug("a JetStream group has a leader: the bus request is sent again", "group", g, "leader", leader)
					cancel()
					return
				}
			}
		}
	}()
	return func() bool {
		<-done
		return fired
	}
}
