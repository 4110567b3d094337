package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	descSessions = prometheus.NewDesc("airlock_sessions",
		"Sessions in the catalog, by residency (resident or dormant).", []string{"residency"}, nil)
	descTurns = prometheus.NewDesc("airlock_turns",
		"Agent turns, by state (active or queued).", []string{"state"}, nil)
	descConnections = prometheus.NewDesc("airlock_connections",
		"Open owner-socket connections.", nil, nil)
	descApprovals = prometheus.NewDesc("airlock_approvals_waiting",
		"Requests waiting in the approval queue for the operator's decision: calls under ask, room calls of approve-each publications, agents' adapter proposals.", nil, nil)
	descAdapterState = prometheus.NewDesc("airlock_adapter_state",
		"Capability adapter state: 1 for the adapter's current state, 0 for the others.", []string{"adapter", "state"}, nil)
	descAdapterRestarts = prometheus.NewDesc("airlock_adapter_restarts_total",
		"Restarts of a capability adapter's child since it was registered or approved.", []string{"adapter"}, nil)
	descBusConnected = prometheus.NewDesc("airlock_room_bus_connected",
		"1 while the room service's connection to the room bus is up, 0 while it is lost; absent without a room service.", nil, nil)
	descRooms = prometheus.NewDesc("airlock_rooms",
		"Rooms this host is in; absent without a room service.", nil, nil)
	descFabricExpiry = prometheus.NewDesc("airlock_fabric_certificate_expiry_timestamp_seconds",
		"When the fabric node's TLS certificate (certificate=node) and the fabric's CA (certificate=ca) stop being valid, in seconds since the Unix epoch; absent without airlockd --fabric. Past either, the node's peers refuse its routes: alert well before (airlock fabric init writes new ones).", []string{"certificate"}, nil)
	descHostEvents = prometheus.NewDesc("airlock_host_events_total",
		"The host's content-free event counters, as status reports them under host.metrics, by name.", []string{"event"}, nil)
)

// statusCollector reports the daemon's state, read once per scrape from its status function.
type statusCollector struct {
	status             func() Status
	adapters, counters *labelSet
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descTurns, descConnections, descApprovals,
		descAdapterState, descAdapterRestarts, descBusConnected, descRooms, descFabricExpiry, descHostEvents} {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(descSessions, st.Sessions, "resident")
	gauge(descSessions, st.DormantSessions, "dormant")
	gauge(descTurns, st.ActiveTurns, "active")
	gauge(descTurns, st.QueuedTurns, "queued")
	gauge(descConnections, st.Connections)
	gauge(descApprovals, st.ApprovalsWaiting)
	// Two registrations past the bound would both be "other": one series each is reported, the
	// first, rather than a duplicate the registry refuses.
	reported := make(map[string]bool, len(st.Adapters))
	for _, a := range st.Adapters {
		name := c.adapters.bound(a.Name)
		if reported[name] {
			continue
		}
		reported[name] = true
		for _, s := range AdapterStates {
			v := 0
			if s == a.State {
				v = 1
			}
			gauge(descAdapterState, v, name, s)
		}
		ch <- prometheus.MustNewConstMetric(descAdapterRestarts, prometheus.CounterValue, float64(a.Restarts), name)
	}
	for name, n := range st.Counters {
		if name = c.counters.bound(name); name == Other {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descHostEvents, prometheus.CounterValue, float64(n), name)
	}
	if f := st.Fabric; f != nil {
		ch <- prometheus.MustNewConstMetric(descFabricExpiry, prometheus.GaugeValue, float64(f.Certificate.Unix()), "node")
		ch <- prometheus.MustNewConstMetric(descFabricExpiry, prometheus.GaugeValue, float64(f.CA.Unix()), "ca")
	}
	if r := st.Rooms; r != nil {
		up := 0
		if r.BusConnected {
			up = 1
		}
		gauge(descBusConnected, up)
		gauge(descRooms, r.Rooms)
	}
}
