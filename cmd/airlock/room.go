package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/client"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/visible"
)

// roomCallTimeout bounds a room observe or invoke: the call's own deadline, with a per-call
// approval wait (at most 70 s), and room to spare.
const roomCallTimeout = 90 * time.Second

// roomView is a room as the daemon shows it.
type roomView struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Owner   string `json:"owner"`
	Members int    `json:"members"`
	Self    bool   `json:"self"`
}

// short abbreviates a host id for tables; --json shows it whole.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func (a *app) roomSimple(ctx context.Context, name, op string, args []string, positional string, payload func(string) any, print func(io.Writer, json.RawMessage)) int {
	o, fs := a.newCommand(name)
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope")
	var names []string
	if positional != "" {
		names = []string{positional}
	}
	pos, code, done := a.parse(o, fs, args, names...)
	if done {
		return code
	}
	arg := ""
	if len(pos) > 0 {
		arg = pos[0]
	}
	cmd := client.Command{Operation: op}
	if payload != nil {
		cmd.Payload = payload(arg)
	}
	data, err := a.call(ctx, protocol.Version2, cmd)
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { print(w, data) })
}

// sayMember is roomSimple's printer of an answer that names one thing: the string member of
// data, in format's one %s.
func sayMember(member, format string) func(io.Writer, json.RawMessage) {
	return func(w io.Writer, data json.RawMessage) {
		var r map[string]json.RawMessage
		var v string
		_ = json.Unmarshal(data, &r)
		_ = json.Unmarshal(r[member], &v)
		fmt.Fprintf(w, format, v)
	}
}

func (a *app) roomStatus(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room status", protocol.OpRoomStatus, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var st struct {
			HostID   string `json:"hostId"`
			NATSURL  string `json:"natsUrl"`
			Embedded bool   `json:"embedded"`
			Rooms    int    `json:"rooms"`
		}
		_ = json.Unmarshal(data, &st)
		bus := "joined"
		if st.Embedded {
			bus = "embedded"
		}
		fmt.Fprintf(w, "host %s\nbus %s (%s)\nrooms %d\n", st.HostID, st.NATSURL, bus, st.Rooms)
	})
}

func (a *app) roomBusHosts(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room bus-hosts", protocol.OpListBusHosts, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var res struct {
			Hosts []struct {
				HostID     string    `json:"hostId"`
				AdmittedAt time.Time `json:"admittedAt"`
				Rooms      []string  `json:"rooms"`
				Owns       []string  `json:"owns"`
			} `json:"hosts"`
		}
		_ = json.Unmarshal(data, &res)
		t := newTable(w)
		fmt.Fprintln(t, "HOST	ADMITTED	ROOMS	OWNS")
		for _, h := range res.Hosts {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", h.HostID, h.AdmittedAt.Format(time.RFC3339), dash(strings.Join(h.Rooms, ",")), dash(strings.Join(h.Owns, ",")))
		}
		t.Flush()
	})
}

func (a *app) roomBusRemove(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room bus-remove", protocol.OpRemoveBusHost, args, "HOST",
		func(id string) any { return protocol.BusHostPayload{HostID: id} },
		sayMember("hostId", "removed %s from this host's room bus\n"))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) roomCreate(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room create")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {room}")
	title := fs.String("title", "", "the room's `title` (default: its id)")
	pos, code, done := a.parse(o, fs, args, "ROOM")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpCreateRoom,
		Payload: protocol.CreateRoomPayload{Room: pos[0], Title: *title}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) { fmt.Fprintf(w, "created room %s\n", pos[0]) })
}

func (a *app) roomList(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room list", protocol.OpListRooms, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var res struct {
			Rooms []roomView `json:"rooms"`
		}
		_ = json.Unmarshal(data, &res)
		t := newTable(w)
		fmt.Fprintln(t, "ROOM\tTITLE\tOWNER\tMEMBERS")
		for _, r := range res.Rooms {
			owner := short(r.Owner)
			if r.Self {
				owner = "this host"
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%d\n", r.ID, r.Title, owner, r.Members)
		}
		t.Flush()
	})
}

func (a *app) roomShow(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room show", protocol.OpShowRoom, args, "ROOM",
		func(id string) any { return protocol.RoomPayload{Room: id} },
		func(w io.Writer, data json.RawMessage) {
			var d struct {
				roomView
				Members []struct {
					HostID  string `json:"hostId"`
					Name    string `json:"name"`
					Self    bool   `json:"self"`
					Present bool   `json:"present"`
				} `json:"members"`
				Capabilities []protocol.RoomCapability `json:"capabilities"`
			}
			_ = json.Unmarshal(data, &d)
			fmt.Fprintf(w, "room %s (%s), owner %s\n\n", d.ID, d.Title, d.Owner)
			t := newTable(w)
			fmt.Fprintln(t, "MEMBER\tNAME\tPRESENT")
			for _, m := range d.Members {
				id := m.HostID
				if m.Self {
					id += " (this host)"
				}
				fmt.Fprintf(t, "%s\t%s\t%t\n", id, orDash(m.Name), m.Present)
			}
			t.Flush()
			fmt.Fprintln(w)
			printRoomCaps(w, d.Capabilities)
		})
}

func printRoomCaps(w io.Writer, caps []protocol.RoomCapability) {
	t := newTable(w)
	fmt.Fprintln(t, "PROVIDER\tCAPABILITY\tTITLE\tOBSERVE\tACTIONS\tAVAILABLE")
	for _, c := range caps {
		p := short(c.Provider)
		if c.ProviderSelf {
			p = "this host"
		}
		var acts []string
		for _, x := range c.Actions {
			if x.ApproveEach {
				acts = append(acts, x.Name+" (approve each)")
			} else {
				acts = append(acts, x.Name)
			}
		}
		avail := "yes"
		if !c.Available {
			avail = "no (" + orDash(c.UnavailableReason) + ")"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%t\t%s\t%s\n", p, c.CapabilityID, orDash(c.Title), c.Observe, orDash(strings.Join(acts, ",")), avail)
	}
	t.Flush()
}

func (a *app) roomClose(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room close", protocol.OpCloseRoom, args, "ROOM",
		func(id string) any { return protocol.RoomPayload{Room: id} },
		sayMember("room", "closed room %s\n"))
}

func (a *app) roomInvite(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room invite")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {room, code, expiresAt}")
	name := fs.String("name", "", "the display `name` the joining host gets in the roster")
	pos, code, done := a.parse(o, fs, args, "ROOM")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpInviteRoom,
		Payload: protocol.InviteRoomPayload{Room: pos[0], Name: *name}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var inv struct {
			Code    string    `json:"code"`
			Expires time.Time `json:"expiresAt"`
		}
		_ = json.Unmarshal(data, &inv)
		fmt.Fprintf(w, "%s\n", inv.Code)
		fmt.Fprintf(a.stderr, "one-time join code for %s, valid until %s: pass it to the other host's operator for 'airlock room join -'\n",
			pos[0], inv.Expires.Local().Format(time.TimeOnly))
	})
}

// roomRemove takes one member out of a room this host owns.
func (a *app) roomRemove(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room remove")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {room, hostId, removed}")
	pos, code, done := a.parse(o, fs, args, "ROOM", "HOST")
	if done {
		return code
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpRemoveRoomMember,
		Payload: protocol.RoomMemberPayload{Room: pos[0], HostID: pos[1]}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Removed bool `json:"removed"`
		}
		_ = json.Unmarshal(data, &r)
		if r.Removed {
			fmt.Fprintf(w, "removed %s from room %s\n", pos[1], pos[0])
		} else {
			fmt.Fprintf(w, "%s is not a member of room %s: nothing to do\n", pos[1], pos[0])
		}
	})
}

// roomJoin joins with a code given as the argument or, with "-", read from stdin so that it
// stays out of the process list and shell history.
func (a *app) roomJoin(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room join")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {room}")
	pos, code, done := a.parse(o, fs, args, "CODE")
	if done {
		return code
	}
	joinCode := pos[0]
	if joinCode == "-" {
		line, err := bufio.NewReader(io.LimitReader(a.stdin, protocol.MaxJoinCodeLen+2)).ReadString('\n')
		if err != nil && err != io.EOF {
			return a.failUsage(o, usageErrorf("reading the join code from stdin: %v", err))
		}
		joinCode = strings.TrimSpace(line)
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpJoinRoom,
		Payload: protocol.JoinRoomPayload{Code: joinCode}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Room roomView `json:"room"`
		}
		_ = json.Unmarshal(data, &r)
		fmt.Fprintf(w, "joined room %s (%s), owner %s, %d members\n", r.Room.ID, r.Room.Title, short(r.Room.Owner), r.Room.Members)
	})
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (a *app) roomPublish(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room publish")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {capability}")
	roomID := fs.String("room", "", "the `room`")
	capID := fs.String("cap", "", "the local capability `id`")
	actions := fs.String("actions", "", "comma-separated `actions` that may be invoked (default: all)")
	observe := fs.Bool("observe", false, "allow observe")
	members := fs.String("members", "", "comma-separated member `host ids` the publication is limited to (default: all)")
	approveEach := fs.Bool("approve-each", false, "every invoke by another host waits for this host's operator (airlock room approve)")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *roomID == "" || *capID == "" {
		return a.failUsage(o, usageErrorf("--room and --cap are required"))
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpPublishCapability,
		Payload: protocol.PublishCapabilityPayload{Room: *roomID, CapabilityID: *capID, Actions: splitList(*actions),
			Observe: *observe, Members: splitList(*members), ApproveEach: *approveEach}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Capability protocol.RoomCapability `json:"capability"`
		}
		_ = json.Unmarshal(data, &r)
		fmt.Fprintf(w, "published %s into %s\n", *capID, *roomID)
		printRoomCaps(w, []protocol.RoomCapability{r.Capability})
	})
}

func (a *app) roomUnpublish(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room unpublish")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {unpublished}")
	roomID := fs.String("room", "", "the `room`")
	capID := fs.String("cap", "", "the local capability `id`")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *roomID == "" || *capID == "" {
		return a.failUsage(o, usageErrorf("--room and --cap are required"))
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpUnpublishCapability,
		Payload: protocol.RoomCapabilityPayload{Room: *roomID, CapabilityID: *capID}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Unpublished bool `json:"unpublished"`
		}
		_ = json.Unmarshal(data, &r)
		if r.Unpublished {
			fmt.Fprintf(w, "unpublished %s from %s\n", *capID, *roomID)
		} else {
			fmt.Fprintf(w, "%s was not published in %s\n", *capID, *roomID)
		}
	})
}

func (a *app) roomCaps(ctx context.Context, args []string) int {
	o, fs := a.newCommand("room caps")
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {capabilities}")
	roomID := fs.String("room", "", "the `room`")
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *roomID == "" {
		return a.failUsage(o, usageErrorf("--room is required"))
	}
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpListRoomCapabilities,
		Payload: protocol.RoomPayload{Room: *roomID}})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Capabilities []protocol.RoomCapability `json:"capabilities"`
		}
		_ = json.Unmarshal(data, &r)
		printRoomCaps(w, r.Capabilities)
	})
}

// resolveProvider finds the one provider publishing capability in room, for a call without
// --provider.
func (a *app) resolveProvider(ctx context.Context, roomID, capability string) (string, error) {
	data, err := a.call(ctx, protocol.Version2, client.Command{Operation: protocol.OpListRoomCapabilities,
		Payload: protocol.RoomPayload{Room: roomID}})
	if err != nil {
		return "", err
	}
	var r struct {
		Capabilities []protocol.RoomCapability `json:"capabilities"`
	}
	if err := decodeData(data, &r); err != nil {
		return "", err
	}
	var found []string
	for _, c := range r.Capabilities {
		if c.CapabilityID == capability {
			found = append(found, c.Provider)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", usageErrorf("no provider publishes %s in %s to this host (see airlock room caps --room %s)", capability, roomID, roomID)
	}
	return "", usageErrorf("%d providers publish %s in %s: name one with --provider", len(found), capability, roomID)
}

func (a *app) roomCall(ctx context.Context, name string, invoke bool, args []string) int {
	o, fs := a.newCommand(name)
	fs.BoolVar(&o.json, "json", false, "print the JSON envelope; data is {room, provider, capabilityId, action?, result}")
	roomID := fs.String("room", "", "the `room`")
	capID := fs.String("cap", "", "the capability `id`")
	provider := fs.String("provider", "", "the provider's host `id` (default: the one provider of --cap in the room)")
	var action, argsJSON *string
	if invoke {
		action = fs.String("action", "", "action `name`")
		argsJSON = fs.String("args", "{}", "action arguments as a JSON `object`")
	}
	if _, code, done := a.parse(o, fs, args); done {
		return code
	}
	if *roomID == "" || *capID == "" {
		return a.failUsage(o, usageErrorf("--room and --cap are required"))
	}
	p := protocol.RoomCallPayload{Room: *roomID, Provider: *provider, CapabilityID: *capID}
	if invoke {
		if *action == "" {
			return a.failUsage(o, usageErrorf("--action is required"))
		}
		raw := json.RawMessage(*argsJSON)
		if !json.Valid(raw) {
			return a.failUsage(o, usageErrorf("--args is not valid JSON"))
		}
		p.Action, p.Args = *action, raw
	}
	if p.Provider == "" {
		var err error
		if p.Provider, err = a.resolveProvider(ctx, p.Room, p.CapabilityID); err != nil {
			return o.fail(err)
		}
	}
	op := protocol.OpObserveRoomCapability
	if invoke {
		op = protocol.OpInvokeRoomCapability
	}
	data, err := a.callWithin(ctx, roomCallTimeout, protocol.Version2, client.Command{Operation: op, Payload: p})
	if err != nil {
		return o.fail(err)
	}
	return o.succeed(data, func(w io.Writer) {
		var r struct {
			Result json.RawMessage `json:"result"`
		}
		_ = json.Unmarshal(data, &r)
		out, err := json.MarshalIndent(r.Result, "", "  ")
		if err != nil {
			out = r.Result
		}
		fmt.Fprintf(w, "%s\n", out)
	})
}

func (a *app) roomObserve(ctx context.Context, args []string) int {
	return a.roomCall(ctx, "room observe", false, args)
}

func (a *app) roomInvoke(ctx context.Context, args []string) int {
	return a.roomCall(ctx, "room invoke", true, args)
}

func (a *app) roomOpenUI(ctx context.Context, args []string) int {
	return a.roomSimple(ctx, "room open-ui", protocol.OpRoomUILogin, args, "", nil, func(w io.Writer, data json.RawMessage) {
		var res struct {
			URL       string    `json:"url"`
			ExpiresAt time.Time `json:"expiresAt"`
		}
		_ = json.Unmarshal(data, &res)
		// The URL alone on stdout, as room invite prints its code: xdg-open "$(airlock room
		// open-ui)" opens it.
		fmt.Fprintf(w, "%s\n", res.URL)
		fmt.Fprintf(a.stderr, "open it in a browser on this host before %s; it logs in once\n", res.ExpiresAt.Local().Format(time.TimeOnly))
	})
}

// terminalJSON is raw (another host's JSON) on one line and safe for a terminal: compact,
// and with every character of visible.Hidden (controls, bidirectional and other format
// characters, separators), which JSON allows raw in a string but a terminal may act on or
// not show, written as a \u escape (a valid JSON string escape, a surrogate pair above
// U+FFFF; such characters appear only inside strings). Text that is not JSON is quoted whole.
func terminalJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return strconv.QuoteToASCII(string(raw))
	}
	var out strings.Builder
	for _, r := range b.String() {
		if !visible.Hidden(r) {
			out.WriteRune(r)
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			fmt.Fprintf(&out, "\\u%04x\\u%04x", r1, r2)
			continue
		}
		fmt.Fprintf(&out, "\\u%04x", r)
	}
	return out.String()
}
