package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/airlockhq/airlock/internal/bus"
	"github.com/airlockhq/airlock/internal/protocol"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// fabricInitResult is fabric init's --json data.
type fabricInitResult struct {
	Dir   string           `json:"dir"`
	Nodes []fabricInitNode `json:"nodes"`
}

type fabricInitNode struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	Dir  string `json:"dir"`
}

// fabricInit writes a cluster's fabric: airlock fabric init --dir DIR --node n1=IP --host
// n1=HOSTID … [--room ROOM=OWNER,MEMBER…]. It needs no daemon: it writes files only.
func (a *app) fabricInit(_ context.Context, args []string) int {
	o, fs := a.newCommand("fabric init")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {dir, nodes}")
	dir := fs.String("dir", "", "write the fabric under `DIR` (created 0700; must be empty)")
	cluster := fs.String("cluster", "airlock", "the cluster's `name` (also its JetStream domain)")
	clientPort := fs.Int("client-port", bus.DefaultClientPort, "every node's client `port`")
	routePort := fs.Int("route-port", bus.DefaultRoutePort, "every node's route `port`")
	var nodes, hosts, rooms listFlag
	fs.Var(&nodes, "node", "a node, `NAME=IP` (repeat; one per machine)")
	fs.Var(&hosts, "host", "the airlockd host id of a node's machine, `NAME=HOSTID` (repeat; one per node)")
	fs.Var(&rooms, "room", "a room and its members' nodes, `ROOM=OWNER[,MEMBER…]` (repeat)")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *dir == "" {
		return a.failUsage(o, usageErrorf("--dir is required"))
	}
	if len(nodes) == 0 {
		return a.failUsage(o, usageErrorf("at least one --node NAME=IP is required"))
	}
	spec := bus.FabricSpec{Cluster: *cluster, ClientPort: *clientPort, RoutePort: *routePort, Rooms: map[string][]string{}}
	hostOf := map[string]string{}
	for _, h := range hosts {
		name, id, ok := strings.Cut(h, "=")
		if !ok || name == "" || id == "" {
			return a.failUsage(o, usageErrorf("--host %q: want NAME=HOSTID", h))
		}
		hostOf[name] = id
	}
	for _, n := range nodes {
		name, ip, ok := strings.Cut(n, "=")
		if !ok || name == "" || ip == "" {
			return a.failUsage(o, usageErrorf("--node %q: want NAME=IP", n))
		}
		id, ok := hostOf[name]
		if !ok {
			return a.failUsage(o, usageErrorf("node %s has no --host %s=HOSTID", name, name))
		}
		delete(hostOf, name)
		spec.Nodes = append(spec.Nodes, bus.NodeSpec{Name: name, IP: ip, Host: id})
	}
	for name := range hostOf {
		return a.failUsage(o, usageErrorf("--host %s names no --node", name))
	}
	for _, r := range rooms {
		id, members, ok := strings.Cut(r, "=")
		if !ok || id == "" || members == "" {
			return a.failUsage(o, usageErrorf("--room %q: want ROOM=OWNER[,MEMBER…]", r))
		}
		if _, dup := spec.Rooms[id]; dup {
			return a.failUsage(o, usageErrorf("--room %s given twice", id))
		}
		spec.Rooms[id] = strings.Split(members, ",")
	}
	if err := bus.InitFabric(*dir, spec); err != nil {
		var fe *bus.FabricError
		if errors.As(err, &fe) && fe.Code == bus.CodeFabricInvalid {
			return a.failUsage(o, usageErrorf("%v", err))
		}
		return o.fail(fabricError(err))
	}
	res := fabricInitResult{Dir: *dir}
	for _, n := range spec.Nodes {
		res.Nodes = append(res.Nodes, fabricInitNode{Name: n.Name, IP: n.IP, Dir: filepath.Join(*dir, n.Name)})
	}
	return o.succeed(res, func(w io.Writer) {
		fmt.Fprintf(w, "wrote a fabric of %s under %s (the CA key ca-key.pem stays there)\n", count(len(res.Nodes), "node"), *dir)
		for _, n := range res.Nodes {
			fmt.Fprintf(w, "  %-12s %-16s copy %s/ to that machine; start: airlockd --fabric <there>/fabric.json\n", n.Name, n.IP, n.Dir)
		}
	})
}

// fabricStatus shows the daemon's room bus node: airlock fabric status [--json]. With
// airlockd --fabric, the node's routes and their round trips, its leaf connections and
// JetStream's meta leader with its peers; without, the single local node.
func (a *app) fabricStatus(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "fabric status", protocol.OpFabricStatus, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var st bus.FabricStatus
		_ = json.Unmarshal(data, &st)
		_ = bus.WriteStatus(w, st)
	})
}

// fabricError reports a fabric failure under its stable code (fabric_file and the like).
func fabricError(err error) *cliError {
	code := bus.CodeFabricFile
	var fe *bus.FabricError
	if errors.As(err, &fe) {
		code = fe.Code
	}
	return &cliError{body: protocol.Error{Code: code, Message: err.Error()}, exit: exitFailure}
}
