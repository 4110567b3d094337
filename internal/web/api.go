package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/visible"
)

// errorBody is the JSON of every error answer.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var b errorBody
	b.Error.Code, b.Error.Message = code, message
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := pageJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"the answer is not serializable"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

// pageJSON is the JSON encoding of everything the page receives (every answer and every
// event): json.Marshal, then every string in it, object keys included, at any depth (args,
// results and schemas are embedded as they came), with visible.Show applied. This is the one
// place where the page's data is made safe to show: a bidirectional override, zero-width
// character or separator another host wrote reaches the page as the text <U+202E>, never as
// the character, whatever element or attribute the page puts it in.
func pageJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return showStrings(b)
}

// showStrings rewrites the strings of b, valid JSON as json.Marshal writes it, that
// visible.Show changes; the rest is copied as it is.
func showStrings(b []byte) ([]byte, error) {
	var out []byte
	last := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		end := i + 1
		for end < len(b) && b[end] != '"' {
			if b[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(b) {
			return nil, errors.New("web: unterminated string in JSON")
		}
		end++ // past the closing quote
		var s string
		if err := json.Unmarshal(b[i:end], &s); err != nil {
			return nil, err
		}
		if shown := visible.Show(s); shown != s {
			q, err := json.Marshal(shown)
			if err != nil {
				return nil, err
			}
			out = append(append(out, b[last:i]...), q...)
			last = end
		}
		i = end - 1
	}
	if out == nil {
		return b, nil
	}
	return append(out, b[last:]...), nil
}

// decodeBody decodes a bounded JSON body strictly into v, answering 413 or 400 itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		if isBodyTooLarge(err) {
			writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "request body over the page's limit")
		} else {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "unreadable request body")
		}
		return false
	}
	// Strictly, as every airlock decoder: encoding/json matches keys case-insensitively, so
	// {"room":"a","Room":"b"} decoded as room b (TestBodyCaseVariantKeys).
	if err := ndjson.Decode(b, v, ndjson.Closed); err != nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "malformed request body")
		return false
	}
	return true
}

// backendCtx bounds a backend call by timeout and sets the response's write deadline to match.
func backendCtx(w http.ResponseWriter, r *http.Request, timeout time.Duration) (context.Context, context.CancelFunc) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + writeSlack))
	return context.WithTimeout(r.Context(), timeout)
}

func (s *Server) apiSession(w http.ResponseWriter, _ *http.Request, sess session) {
	writeJSON(w, http.StatusOK, map[string]string{"csrf": sess.csrf})
}

func (s *Server) apiRooms(w http.ResponseWriter, r *http.Request, _ session) {
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	rooms, err := s.backend.Rooms(ctx)
	if err != nil {
		s.backendError(w, "rooms", err)
		return
	}
	if rooms == nil {
		rooms = []Room{}
	}
	writeJSON(w, http.StatusOK, rooms)
}

// actionView is an Action with its generated form.
type actionView struct {
	Action
	Form Form `json:"form"`
}

type capabilityView struct {
	Capability
	Actions []actionView `json:"actions"`
}

type roomView struct {
	RoomDetail
	Capabilities []capabilityView `json:"capabilities"`
}

func (s *Server) apiRoom(w http.ResponseWriter, r *http.Request, _ session) {
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	d, err := s.backend.Room(ctx, r.PathValue("id"))
	if err != nil {
		s.backendError(w, "room", err)
		return
	}
	v := roomView{RoomDetail: d, Capabilities: make([]capabilityView, 0, len(d.Capabilities))}
	if v.Members == nil {
		v.Members = []Member{}
	}
	for _, c := range d.Capabilities {
		cv := capabilityView{Capability: c, Actions: make([]actionView, 0, len(c.Actions))}
		for _, a := range c.Actions {
			cv.Actions = append(cv.Actions, actionView{Action: a, Form: FormOf(a.Input)})
		}
		v.Capabilities = append(v.Capabilities, cv)
	}
	writeJSON(w, http.StatusOK, v)
}

type observeRequest struct {
	Room       string `json:"room"`
	Provider   string `json:"provider"`
	Capability string `json:"capability"`
}

type invokeRequest struct {
	Room       string          `json:"room"`
	Provider   string          `json:"provider"`
	Capability string          `json:"capability"`
	Action     string          `json:"action"`
	Args       json.RawMessage `json:"args"`
}

type resultBody struct {
	Result json.RawMessage `json:"result"`
}

func (s *Server) apiObserve(w http.ResponseWriter, r *http.Request, _ session) {
	var req observeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	res, err := s.backend.Observe(ctx, req.Room, req.Provider, req.Capability)
	if err != nil {
		s.backendError(w, "observe", err)
		return
	}
	writeResult(w, res)
}

func (s *Server) apiInvoke(w http.ResponseWriter, r *http.Request, _ session) {
	var req invokeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	args := bytes.TrimSpace(req.Args)
	if len(args) == 0 {
		args = []byte("{}")
	}
	if args[0] != '{' {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "args must be a JSON object")
		return
	}
	ctx, cancel := backendCtx(w, r, InvokeRequestTimeout)
	defer cancel()
	res, err := s.backend.Invoke(ctx, req.Room, req.Provider, req.Capability, req.Action, json.RawMessage(args))
	if err != nil {
		s.backendError(w, "invoke", err)
		return
	}
	writeResult(w, res)
}

// writeResult answers with a backend result; one that is not JSON becomes null rather than
// failing the encoding of the whole answer.
func writeResult(w http.ResponseWriter, res json.RawMessage) {
	if len(res) == 0 || !json.Valid(res) {
		res = json.RawMessage("null")
	}
	writeJSON(w, http.StatusOK, resultBody{Result: res})
}

func (s *Server) apiApprovals(w http.ResponseWriter, r *http.Request, _ session) {
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	list, err := s.backend.Approvals(ctx)
	if err != nil {
		s.backendError(w, "approvals", err)
		return
	}
	if list == nil {
		list = []Approval{}
	}
	for i := range list {
		if len(list[i].Args) > 0 && !json.Valid(list[i].Args) {
			list[i].Args = nil
		}
	}
	writeJSON(w, http.StatusOK, list)
}

type decideRequest struct {
	ID      string `json:"id"`
	Approve *bool  `json:"approve"`
	// Remember, with approve, remembers the approval (Pattern or AnyArgs widen it).
	Remember bool   `json:"remember,omitempty"`
	Pattern  string `json:"pattern,omitempty"`
	AnyArgs  bool   `json:"anyArgs,omitempty"`
}

func (s *Server) apiDecide(w http.ResponseWriter, r *http.Request, _ session) {
	var req decideRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.ID == "" || req.Approve == nil {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "decide needs id and approve")
		return
	}
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	if (req.Pattern != "" || req.AnyArgs) && !req.Remember || req.Remember && !*req.Approve {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "remember goes with approve, pattern and anyArgs with remember")
		return
	}
	var err error
	if req.Remember {
		err = s.backend.ApproveRemember(ctx, req.ID, Remember{Pattern: req.Pattern, AnyArgs: req.AnyArgs})
	} else {
		err = s.backend.Decide(ctx, req.ID, *req.Approve)
	}
	if err != nil {
		s.backendError(w, "decide", err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) apiRemembered(w http.ResponseWriter, r *http.Request, _ session) {
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	list, err := s.backend.Remembered(ctx)
	if err != nil {
		s.backendError(w, "remembered", err)
		return
	}
	if list == nil {
		list = []Memory{}
	}
	writeJSON(w, http.StatusOK, list)
}

type forgetRequest struct {
	ID string `json:"id"`
}

func (s *Server) apiForget(w http.ResponseWriter, r *http.Request, _ session) {
	var req forgetRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.ID == "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "forget needs id")
		return
	}
	ctx, cancel := backendCtx(w, r, RequestTimeout)
	defer cancel()
	if err := s.backend.Forget(ctx, req.ID); err != nil {
		s.backendError(w, "forget", err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}
