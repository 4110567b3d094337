package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/room"
	"github.com/airlockhq/airlock/internal/roomhost"
	"github.com/airlockhq/airlock/internal/web"
)

// WebConfig configures the operator's web page (package web); a nil *WebConfig serves none.
type WebConfig struct {
	// Addr is the page's listen address, host:port: loopback unless AllowNonLoopback.
	Addr string
	// AllowNonLoopback permits a non-loopback Addr (airlockd --http-allow-non-loopback).
	AllowNonLoopback bool
}

// CodeUIDisabled is roomUILogin's code on a daemon that serves no web page.
const CodeUIDisabled = "ui_disabled"

// startWeb starts the page with a backend that reaches the room service once it runs; until
// then (and without one) every backend call answers unavailable.
func (d *Daemon) startWeb() error {
	wc := d.cfg.Web
	if wc == nil {
		return nil
	}
	srv, err := web.New(web.Config{
		Addr: wc.Addr, AllowNonLoopback: wc.AllowNonLoopback, Backend: &webBackend{srv: d.srv},
		// The page logs uncoded backend failures by operation and Go type only.
		Logf: func(format string, args ...any) { d.log.Warn(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	d.web = srv
	d.srv.web.Store(srv)
	d.log.Info("web page listening", "addr", srv.Addr())
	return nil
}

// stopWeb shuts the page down: its event streams end and requests in flight get until ctx
// ends. It runs before the room service stops, so no page request meets a closed service.
func (d *Daemon) stopWeb(ctx context.Context) {
	if d.web == nil {
		return
	}
	d.srv.web.Store(nil)
	if err := d.web.Shutdown(ctx); err != nil {
		d.log.Warn("web page did not stop cleanly", "err", err)
	}
}

// UILogin is the data of roomUILogin: a one-time login URL for this host's web page. It is
// for the owner who asked and is never logged.
type UILogin struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

func (s *Server) uiLogin(cmd *protocol.Command) (any, error) {
	if e := protocol.DecodePayload(cmd, &protocol.EmptyPayload{}); e != nil {
		return nil, e
	}
	w := s.web.Load()
	if w == nil {
		return nil, protocol.Errorf(CodeUIDisabled, "this daemon serves no web page; start airlockd with --http 127.0.0.1:PORT")
	}
	u, err := w.LoginURL()
	if err != nil {
		return nil, protocol.Wrap(protocol.Errorf(protocol.CodeInternal, "no login URL"), err)
	}
	return &UILogin{URL: u, ExpiresAt: time.Now().Add(web.LoginTokenTTL).UTC().Round(time.Second)}, nil
}

// webBackend is web.Backend over the daemon's room service: it converts the service's types
// to the page's and its errors to *web.Error with their machine codes. The service returns
// nothing secret (no capability handle, adapter stderr, endpoint or key); nothing is added.
type webBackend struct{ srv *Server }

var _ web.Backend = (*webBackend)(nil)

func (b *webBackend) service() (*roomhost.Service, error) {
	svc := b.srv.rooms.Load()
	if svc == nil {
		return nil, &web.Error{Code: room.CodeUnavailable, Message: "the room service is not running"}
	}
	return svc, nil
}

// webError gives a room service error the page's form: its code and its message (which
// quote no argument, result, code or key); an internal one shows no detail.
func webError(err error) error {
	if err == nil {
		return nil
	}
	var re *roomhost.Error
	if errors.As(err, &re) {
		if re.Code() == room.CodeInternal {
			return &web.Error{Code: web.CodeInternal, Message: "the request failed", Err: err}
		}
		return &web.Error{Code: re.Code(), Message: re.Message(), Err: err}
	}
	var we *web.Error
	if errors.As(err, &we) {
		return err
	}
	return &web.Error{Code: web.CodeInternal, Message: "the request failed", Err: err}
}

func webRoom(r roomhost.Room) web.Room {
	return web.Room{ID: r.ID, Title: r.Title, Owner: string(r.Owner), Members: r.Members}
}

func (b *webBackend) Rooms(ctx context.Context) ([]web.Room, error) {
	svc, err := b.service()
	if err != nil {
		return nil, err
	}
	rooms, err := svc.Rooms(ctx)
	if err != nil {
		return nil, webError(err)
	}
	out := make([]web.Room, 0, len(rooms))
	for _, r := range rooms {
		out = append(out, webRoom(r))
	}
	return out, nil
}

func (b *webBackend) Room(ctx context.Context, id string) (web.RoomDetail, error) {
	svc, err := b.service()
	if err != nil {
		return web.RoomDetail{}, err
	}
	d, err := svc.Room(ctx, id)
	if err != nil {
		return web.RoomDetail{}, webError(err)
	}
	out := web.RoomDetail{Room: webRoom(d.Room), Members: make([]web.Member, 0, len(d.Members)),
		Capabilities: make([]web.Capability, 0, len(d.Capabilities))}
	for _, m := range d.Members {
		out.Members = append(out.Members, web.Member{HostID: string(m.HostID), Name: m.Name, Self: m.Self, Present: m.Present})
	}
	for _, c := range d.Capabilities {
		wc := web.Capability{Provider: string(c.Provider), ProviderSelf: c.ProviderSelf, CapabilityID: c.CapabilityID,
			Title: c.Title, Observe: c.Observe, Actions: make([]web.Action, 0, len(c.Actions)),
			Available: c.Available, UnavailableReason: c.UnavailableReason}
		for _, a := range c.Actions {
			wc.Actions = append(wc.Actions, web.Action{Name: a.Name, Title: a.Title, Input: a.Input, ApproveEach: a.ApproveEach})
		}
		out.Capabilities = append(out.Capabilities, wc)
	}
	return out, nil
}

func (b *webBackend) Observe(ctx context.Context, roomID, provider, capability string) (json.RawMessage, error) {
	svc, err := b.service()
	if err != nil {
		return nil, err
	}
	res, err := svc.Observe(ctx, roomID, provider, capability)
	return res, webError(err)
}

func (b *webBackend) Invoke(ctx context.Context, roomID, provider, capability, action string, args json.RawMessage) (json.RawMessage, error) {
	svc, err := b.service()
	if err != nil {
		return nil, err
	}
	res, err := svc.Invoke(ctx, roomID, provider, capability, action, args)
	return res, webError(err)
}

// webEventBuffer bounds the converted events queued for one page stream.
const webEventBuffer = roomhost.SubscriberBuffer

// Subscribe relays the room service's call log, when it runs, and the approval queue's
// events as the page's events. The relay goroutine ends when both channels have closed
// (ctx ended, or the service closed) and closes its own then; it never blocks on a slow
// reader, whose oldest queued event is dropped instead.
func (b *webBackend) Subscribe(ctx context.Context) (<-chan web.Event, error) {
	var in <-chan roomhost.Event
	if svc := b.srv.rooms.Load(); svc != nil {
		ch, err := svc.Subscribe(ctx)
		if err != nil {
			return nil, webError(err)
		}
		in = ch
	}
	approvals := b.srv.approvalFeed.subscribe(ctx)
	out := make(chan web.Event, webEventBuffer)
	go func() {
		defer close(out)
		for in != nil || approvals != nil {
			var we web.Event
			select {
			case e, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				we = webEvent(e)
			case e, ok := <-approvals:
				if !ok {
					approvals = nil
					continue
				}
				we = webApprovalEvent(e)
			}
			select {
			case out <- we:
				continue
			default:
			}
			select {
			case <-out: // full: drop the oldest
			default:
			}
			// Only this goroutine sends, so there is room now.
			out <- we
		}
	}()
	return out, nil
}

func webEvent(e roomhost.Event) web.Event {
	return web.Event{Kind: e.Kind, Time: e.Time, Room: e.Room, Caller: string(e.Caller), Provider: string(e.Provider),
		Capability: e.Capability, Operation: string(e.Operation), Action: e.Action, Outcome: e.Outcome, DurationMs: e.DurationMs}
}
