package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Bounds of the embedded server's log lines in airlockd's log: at most natsLogBurst a
// natsLogWindow, the rest counted and reported once the window ends. A port scanner's failed
// TLS handshakes, or a peer that keeps failing to connect, must not fill the operator's log.
const (
	natsLogBurst  = 20
	natsLogWindow = time.Minute
)

// natsLog is the embedded NATS server's logger: its errors and warnings go to the daemon's
// log, component=nats, at those levels; its notices (start, stop, a route or leaf connected)
// at debug; its debug and trace lines nowhere. The server never logs a message's payload at
// these levels, only names, subjects and addresses, which are not secrets here (room and host
// ids, public nkeys).
type natsLog struct {
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	start      time.Time // the current window's
	lines      int       // written in it
	suppressed int       // dropped in it
}

func newNATSLog(log *slog.Logger) *natsLog {
	return &natsLog{log: log.With("component", "nats"), now: time.Now}
}

func (l *natsLog) Noticef(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }
func (l *natsLog) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *natsLog) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }

// Fatalf is an error here: the embedded server is a part of the daemon, which decides
// itself whether to stop.
func (l *natsLog) Fatalf(format string, v ...any) { l.emit(slog.LevelError, format, v) }
func (l *natsLog) Debugf(string, ...any)          {}
func (l *natsLog) Tracef(string, ...any)          {}

func (l *natsLog) emit(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.mu.Lock()
	now := l.now()
	var dropped int
	if now.Sub(l.start) >= natsLogWindow {
		dropped = l.suppressed
		l.start, l.lines, l.suppressed = now, 0, 0
	}
	ok := l.lines < natsLogBurst
	if ok {
		l.lines++
	} else {
		l.suppressed++
	}
	l.mu.Unlock()
	if dropped > 0 {
		l.log.Warn("embedded bus log lines suppressed", "lines", dropped, "window", natsLogWindow)
	}
	if ok {
		l.log.Log(ctx, level, fmt.Sprintf(format, v...))
	}
}
