package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/web"
)

// MetricsConfig configures the Prometheus endpoint (package metrics); a nil *MetricsConfig
// serves none and counts nothing.
type MetricsConfig struct {
	// Addr is the endpoint's listen address, host:port: loopback unless AllowNonLoopback.
	Addr string
	// AllowNonLoopback permits a non-loopback Addr (airlockd --metrics-allow-non-loopback).
	AllowNonLoopback bool
}

// promServer is the endpoint (this package imports runtime/metrics too).
type promServer = metrics.Server

// startMetrics creates the collectors, installs their gate hook and starts their endpoint.
// This happens before anything can be called, so that Server.prom never changes while the
// daemon runs and the hook sees every call.
func (d *Daemon) startMetrics() error {
	mc := d.cfg.Metrics
	if mc == nil {
		return nil
	}
	m := metrics.New(d.metricsStatus)
	srv, err := metrics.NewServer(m, metrics.ServerConfig{Addr: mc.Addr, AllowNonLoopback: mc.AllowNonLoopback})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	d.srv.prom, d.promSrv = m, srv
	d.srv.gate.AddHook(m.Hook(d.srv.knownCapability))
	d.log.Info("metrics endpoint listening", "addr", srv.Addr(), "path", "/metrics")
	return nil
}

// stopMetrics stops the endpoint; scrapes in flight get until ctx ends.
func (d *Daemon) stopMetrics(ctx context.Context) {
	if d.promSrv == nil {
		return
	}
	if err := d.promSrv.Shutdown(ctx); err != nil {
		d.log.Warn("metrics endpoint did not stop cleanly", "err", err)
	}
}

// metricsStatus is the daemon's state for one scrape: what host status reports, read when
// Prometheus asks rather than counted where it changes.
func (d *Daemon) metricsStatus() metrics.Status {
	v := d.sessions.Host()
	d.srv.metricsSnapshot(v.Metrics)
	st := metrics.Status{
		Sessions:        len(v.Sessions),
		DormantSessions: v.Dormant,
		ActiveTurns:     v.ActiveTurns,
		QueuedTurns:     v.QueuedTurns,
		Connections:     d.srv.connections(),
		Counters:        v.Metrics,
	}
	for _, a := range d.srv.adapters.sup.Status() {
		st.Adapters = append(st.Adapters, metrics.Adapter{Name: a.Name, State: string(a.State), Restarts: a.Restarts})
	}
	if svc := d.srv.rooms.Load(); svc != nil {
		st.Rooms = &metrics.Rooms{BusConnected: svc.BusConnected(), Rooms: svc.Status().Rooms}
	}
	if r := d.cfg.Rooms; r != nil && r.Fabric != nil {
		cert, ca := r.Fabric.Expiry()
		st.Fabric = &metrics.FabricExpiry{Certificate: cert, CA: ca}
	}
	st.ApprovalsWaiting = d.approvalsWaiting()
	return st
}

// approvalsWaiting counts the requests waiting for the operator's decision, for
// airlock_approvals_waiting: every one is in the one approval queue (local calls under ask,
// room calls of approve-each publications, agent proposals).
func (d *Daemon) approvalsWaiting() int { return d.srv.approvals.Len() }

// Every call at the gate — the owner socket's invokeTool, observeCapability and
// invokeCapability (door socket, or mcp for airlock mcp's commands), an agent turn's tool
// call (turn), a room call this host provides (room) — is counted by the metrics' gate hook
// (metrics.Metrics.Hook), installed by startMetrics before the socket accepts: once, at the
// gate's After, refusals included. A room call this host makes is counted where it enters the
// room service, by meterRoomCall, with the door it came through; the provider counts it
// again at its gate, at its room door.

// knownCapability is the metrics hook's metrics.Known: whether a capability that a call the
// gate refused names is served here, and whether it has the action.
func (s *Server) knownCapability(capability, action string) (bool, bool) {
	d, err := s.adapters.sup.Describe(capability)
	if err != nil {
		return false, false
	}
	for _, a := range d.Actions {
		if a.Name == action {
			return true, true
		}
	}
	return true, false
}

// meterRoomCall counts a room call this host made through door that started at start and
// ended with err, as its caller got it.
func (s *Server) meterRoomCall(door string, invoke bool, start time.Time, err error) {
	if s.prom == nil {
		return
	}
	c := metrics.RoomCall{Door: door, Operation: "observe", Code: roomCallCode(err)}
	if invoke {
		c.Operation = "invoke"
	}
	s.prom.ObserveRoomCall(c, time.Since(start))
}

// roomCallCode is the code of a room call's error ("" for none): the room service's, the
// page's or the daemon's.
func roomCallCode(err error) string {
	if err == nil {
		return ""
	}
	var re *roomhost.Error
	if errors.As(err, &re) {
		return re.Code()
	}
	var we *web.Error
	if errors.As(err, &we) {
		return we.Code
	}
	return protocol.AsError(err).Code
}

// MetricsAddr returns the metrics endpoint's bound host:port, "" when it serves none.
func (d *Daemon) MetricsAddr() string {
	if d.promSrv == nil {
		return ""
	}
	return d.promSrv.Addr()
}
