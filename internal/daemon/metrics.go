package daemon

import (
	"context"
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/capadapter/capclient"
	"github.com/airlockhq/airlock/internal/metrics"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/roomhost"
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

// startMetrics creates the collectors and starts their endpoint. The collectors are created
// before anything can be called, so that Server.prom never changes while the daemon runs.
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
	// Every request waiting for the operator is in the one queue: room calls and local ones.
	st.ApprovalsWaiting = d.srv.approvals.Len()
	return st
}

// The call counters of the doors that exist today are taken at one place per door, as the
// call is answered:
//
//   - the owner socket's invokeTool, observeCapability and invokeCapability: meterTool and
//     meterCapability, called where the answer is built, on the synchronous path (dispatch)
//     and on the one that needs no goroutine (startTool, startCapability);
//   - a room call this host provides: meteredCapabilities, the room provider's invoker, which
//     runs after room authorization (and a per-call approval) and sees exactly the calls that
//     reach an adapter.
//
// These are the places the gate (DESIGN.md, "One gate for every effect") takes over: once
// every effect passes it, it observes each call with metrics.Metrics.ObserveCall, for every
// door, and these calls go.

// meterTool counts an invokeTool of the owner socket that started at start. p is nil when the
// command did not decode; code is "" for success.
func (s *Server) meterTool(start time.Time, p *protocol.InvokeToolPayload, code string) {
	if s.prom == nil {
		return
	}
	op := ""
	if p != nil {
		op = p.Operation
	}
	s.prom.ObserveCall(metrics.Call{Door: metrics.DoorSocket, Operation: op, Code: code}, time.Since(start))
}

// meterCapability counts an observeCapability or invokeCapability of the owner socket that
// started at start. cc is nil when the command did not decode.
func (s *Server) meterCapability(start time.Time, cmd *protocol.Command, cc *capabilityCall, err error) {
	if s.prom == nil {
		return
	}
	c := metrics.Call{Door: metrics.DoorSocket, Operation: "invoke"}
	if cmd.Operation == protocol.OpObserveCapability {
		c.Operation = "observe"
	}
	if err != nil {
		c.Code = protocol.AsError(err).Code
	}
	if cc != nil {
		c.Capability, c.Action = capabilityLabels(cc.id, cc.action, c.Code)
	}
	s.prom.ObserveCall(c, time.Since(start))
}

// capabilityLabels returns the capability and action labels of a call that ended with code:
// a capability or action the adapter does not know is no label value, since a client may
// name any.
func capabilityLabels(id, action, code string) (string, string) {
	switch code {
	case capadapter.CodeUnknownCapability: // roomhost.CodeUnknownCapability too
		return "", ""
	case capadapter.CodeUnsupportedAction:
		return id, ""
	}
	return id, action
}

// meteredCapabilities is the room provider's invoker when metrics are on: the capability
// supervisor, with each call counted at the room door.
type meteredCapabilities struct {
	*capclient.Supervisor
	prom *metrics.Metrics
}

var _ room.StartInvoker = meteredCapabilities{}
var _ roomhost.Capabilities = meteredCapabilities{}

func (m meteredCapabilities) observe(start time.Time, op, capability, action string, err error) {
	code := ""
	if err != nil {
		if code = capadapter.WireCode(err); code == "" {
			code = capadapter.CodeInternal
		}
	}
	capability, action = capabilityLabels(capability, action, code)
	m.prom.ObserveCall(metrics.Call{Door: metrics.DoorRoom, Operation: op, Capability: capability, Action: action, Code: code}, time.Since(start))
}

// Observe runs an observe for the room provider and counts it.
func (m meteredCapabilities) Observe(ctx context.Context, capability string) (json.RawMessage, error) {
	start := time.Now()
	res, err := m.Supervisor.Observe(ctx, capability)
	m.observe(start, "observe", capability, "", err)
	return res, err
}

// Invoke runs an invoke for the room provider and counts it.
func (m meteredCapabilities) Invoke(ctx context.Context, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	start := time.Now()
	res, err := m.Supervisor.Invoke(ctx, capability, action, args)
	m.observe(start, "invoke", capability, action, err)
	return res, err
}

// StartObserve starts an observe for the room provider; it is counted when it ends.
func (m meteredCapabilities) StartObserve(ctx context.Context, capability string, done func(json.RawMessage, error)) {
	start := time.Now()
	m.Supervisor.StartObserve(ctx, capability, func(res json.RawMessage, err error) {
		m.observe(start, "observe", capability, "", err)
		done(res, err)
	})
}

// StartInvoke starts an invoke for the room provider; it is counted when it ends.
func (m meteredCapabilities) StartInvoke(ctx context.Context, capability, action string, args json.RawMessage, done func(json.RawMessage, error)) {
	start := time.Now()
	m.Supervisor.StartInvoke(ctx, capability, action, args, func(res json.RawMessage, err error) {
		m.observe(start, "invoke", capability, action, err)
		done(res, err)
	})
}

// roomCapabilities is the room service's view of the local capabilities: the supervisor,
// metered when metrics are on.
// roomSupervisor is what the room service takes of the capability supervisor: the
// capabilities it publishes, and calls that start without waiting (the provider's invoker,
// behind the gate).
type roomSupervisor interface {
	roomhost.Capabilities
	room.StartInvoker
}

func (s *Server) roomCapabilities() roomSupervisor {
	if s.prom == nil {
		return s.adapters.sup
	}
	return meteredCapabilities{Supervisor: s.adapters.sup, prom: s.prom}
}

// MetricsAddr returns the metrics endpoint's bound host:port, "" when it serves none.
func (d *Daemon) MetricsAddr() string {
	if d.promSrv == nil {
		return ""
	}
	return d.promSrv.Addr()
}
