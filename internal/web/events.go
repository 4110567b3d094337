package web

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// apiEvents streams the backend's events as Server-Sent Events until the client goes away, the
// backend closes the subscription, a write stalls past StreamWriteTimeout, its login ends
// (noticed at the next heartbeat), or Shutdown.
// Between events a comment line goes out every HeartbeatInterval. At most MaxStreams run at
// once; the backend's channel bounds what waits for a slow reader.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request, _ session) {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		writeError(w, http.StatusServiceUnavailable, CodeTooManyStreams, "too many event streams are open")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events, err := s.backend.Subscribe(ctx)
	if err != nil {
		s.backendError(w, "subscribe", err)
		return
	}
	// Returning cancels ctx, which ends the subscription; the backend's channel drops the
	// oldest events rather than block its sender, so nothing waits on us after that.
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	write := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The opening comment tells the browser the stream is up.
	if !write([]byte(": airlock events\nretry: 3000\n\n")) {
		return
	}
	heartbeat := time.NewTicker(HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-heartbeat.C:
			// The login is checked at every request, and a stream is one long request: it
			// ends when its login does (SessionTTL, or ended by newer logins past
			// MaxSessions), so that it never outlives it by more than a heartbeat.
			if _, ok := s.session(r); !ok {
				return
			}
			if !write([]byte(": heartbeat\n\n")) {
				return
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			if !write(formatEvent(ev)) {
				return
			}
		}
	}
}

// formatEvent encodes one event frame, its strings shown as pageJSON shows them. JSON never
// holds a raw newline, so the data fits one "data:" line; the event name is one of two
// constants.
func formatEvent(ev Event) []byte {
	kind := EventCall
	if ev.Kind == EventApproval {
		kind = EventApproval
	}
	b, err := pageJSON(ev)
	if err != nil {
		b = []byte("{}")
	}
	out := make([]byte, 0, len(b)+32)
	out = append(out, "event: "...)
	out = append(out, kind...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	out = append(out, "\n\n"...)
	return out
}
