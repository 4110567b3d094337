package session

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"path/filepath"

	"github.com/airlockhq/airlock/internal/model"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/transcript"
	"github.com/airlockhq/airlock/internal/turn"
)

// Provider is a configured model backend. Key is held in memory only; KeyEnv names the
// environment variable it was read from, so that a missing key can be reported by name.
type Provider struct {
	Name    string
	BaseURL string
	Key     string
	KeyEnv  string
}

// ready reports why turns cannot run against this provider: a key is configured but the
// daemon's environment did not hold it.
func (p Provider) ready() *protocol.Error {
	if p.KeyEnv != "" && p.Key == "" {
		return protocol.Retryable(protocol.CodeCredentialsRequired,
			"provider %q needs its key in the daemon's environment variable %s, which is unset or empty", p.Name, p.KeyEnv).
			With("provider", p.Name)
	}
	return nil
}

// modelFor returns the model backend of a policy's model, or the error that refuses it: an
// unconfigured provider is open_failed, a provider whose key is missing credentials_required.
// A restart turns either into a credentials_required quarantine.
func (m *Manager) modelFor(ref *protocol.ModelRef) (turn.Completer, *protocol.Error) {
	if ref == nil {
		return nil, nil
	}
	p, ok := m.cfg.Providers[ref.Provider]
	if !ok {
		return nil, protocol.Errorf(protocol.CodeOpenFailed, "model provider %q is not configured on this host (airlockd --provider)", ref.Provider).
			With("provider", ref.Provider).With("field", "payload.model.provider")
	}
	if e := p.ready(); e != nil {
		return nil, e
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clients[p.Name]
	if c == nil {
		c = model.NewClient(model.Provider{Name: p.Name, BaseURL: p.BaseURL, Key: p.Key})
		m.clients[p.Name] = c
	}
	return c, nil
}

// reasoningEffort maps an open's thinkingLevel to the Chat Completions reasoning_effort, which
// knows low, medium and high; "off" and unset send none.
func reasoningEffort(level string) string {
	switch level {
	case "minimal", "low":
		return "low"
	case "medium":
		return "medium"
	case "high", "xhigh", "max":
		return "high"
	}
	return ""
}

// sessionDir is where a session's transcripts live unless its open names a sessionDir: a
// fixed-length name derived from the session id, which may hold any characters.
func (m *Manager) sessionDir(id string, policy *protocol.Policy) string {
	if policy.SessionDir != "" {
		return policy.SessionDir
	}
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(m.cfg.SessionsDir, "s-"+base64.RawURLEncoding.EncodeToString(sum[:]))
}

// conversation opens the transcript an open asks for: a new one, the one at session.path, the
// latest in the session directory (continue), or exactly the recorded one when ref is set (a
// same-generation reopen or a restart). Memory sessions have none.
func (m *Manager) conversation(ctx context.Context, id string, policy *protocol.Policy, ref *protocol.ConversationRef) (*transcript.File, []model.Message, error) {
	if policy.Mode == protocol.ModeMemory {
		return nil, nil, nil
	}
	path := ""
	switch {
	case ref != nil:
		path = ref.File
	case policy.Mode == protocol.ModeOpen:
		path = policy.Path
	case policy.Mode == protocol.ModeContinue:
		p, ok, err := transcript.Latest(m.sessionDir(id, policy))
		if err != nil {
			return nil, nil, err
		}
		if ok {
			path = p
		}
	}
	if path == "" {
		f, err := transcript.Create(m.sessionDir(id, policy), m.now().UTC())
		return f, nil, err
	}
	f, entries, repaired, err := transcript.Open(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	if repaired {
		m.log.Warn("transcript ended in a torn line; it was cut back to its last whole entry", "sessionId", id, "file", path)
	}
	return f, history(entries), nil
}

// history turns transcript entries into the messages a model is sent.
func history(entries []transcript.Entry) []model.Message {
	msgs := make([]model.Message, 0, len(entries))
	for _, e := range entries {
		if e.Kind != "message" {
			continue
		}
		msg := model.Message{Role: model.Role(e.Role), Content: e.Content, ToolCallID: e.ToolCallID}
		for _, tc := range e.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

// entriesOf turns a turn's messages into transcript entries.
func entriesOf(requestID string, msgs []model.Message) []transcript.Entry {
	out := make([]transcript.Entry, 0, len(msgs))
	for _, msg := range msgs {
		e := transcript.Entry{Kind: "message", Role: string(msg.Role), Content: msg.Content, ToolCallID: msg.ToolCallID, RequestID: requestID}
		for _, tc := range msg.ToolCalls {
			e.ToolCalls = append(e.ToolCalls, transcript.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		out = append(out, e)
	}
	return out
}

func refOf(f *transcript.File) *protocol.ConversationRef {
	if f == nil {
		return nil
	}
	id := f.Identity()
	return &protocol.ConversationRef{ID: id.ID, File: id.File}
}
