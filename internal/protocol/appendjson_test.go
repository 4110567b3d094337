package protocol

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// awkward strings exercise every escaping rule of encoding/json.
var awkward = []string{
	"", "plain", "quote\"back\\slash", "ctl\x00\x01\x1f\b\f\n\r\t", "del\x7f", "<html>&amp;",
	"é ☃ 𝔰", "line\u2028para\u2029", "bad\xffutf8\xc3", "sess-🙂-01",
}

func randString(r *rand.Rand) string { return awkward[r.IntN(len(awkward))] }

func randTime(r *rand.Rand) time.Time {
	t := time.Unix(r.Int64N(4e9), r.Int64N(1e9))
	if r.IntN(2) == 0 {
		t = t.UTC()
	} else {
		t = t.In(time.FixedZone("x", 3600*r.IntN(12)))
	}
	if r.IntN(4) == 0 {
		t = t.Truncate(time.Second)
	}
	return t
}

func randSession(r *rand.Rand) SessionSnapshot {
	s := SessionSnapshot{
		SessionID: randString(r), Generation: r.Int64N(1 << 53), ProtocolVersion: randString(r),
		Name: randString(r), State: randString(r), Residency: randString(r), Sequence: r.Uint64(),
		QueuedTurns: r.IntN(40), ActiveRequestID: randString(r), LastErrorCode: randString(r),
		Attached: r.IntN(5), LastUsedAt: randTime(r), IdleForMs: r.Int64N(1e9),
	}
	if r.IntN(2) == 0 {
		s.Model = &ModelRef{Provider: randString(r), ID: randString(r), ThinkingLevel: randString(r)}
	}
	return s
}

func randHost(r *rand.Rand) HostSnapshot {
	h := HostSnapshot{
		HostInstanceID: randString(r), Ready: r.IntN(2) == 0, Durable: r.IntN(2) == 0, Draining: r.IntN(2) == 0,
		Limits: Limits{r.IntN(100), r.IntN(100), r.IntN(1 << 30), r.IntN(1 << 30), r.IntN(1 << 30), r.IntN(1 << 30),
			MultiplexerLimit{r.IntN(100), r.IntN(10), r.IntN(64)}},
		ActiveTurns: r.IntN(9), QueuedTurns: r.IntN(9), Connections: r.IntN(64), StartedAt: randTime(r),
		UptimeMs: r.Int64N(1e12), Memory: MemoryStats{r.Uint64(), r.Uint64(), r.Uint64()},
		DormantSessions: r.IntN(4096),
		Recovery:        RecoveryHealth{Phase: randString(r), PendingReplays: r.IntN(9), FailureCount: r.IntN(9)},
	}
	if r.IntN(3) > 0 {
		h.Metrics = map[string]uint64{}
		for range r.IntN(6) {
			h.Metrics[randString(r)] = r.Uint64()
		}
	}
	if r.IntN(3) > 0 {
		h.Recovery.FailureCodes = map[string]int{randString(r): r.IntN(9), randString(r): r.IntN(9)}
	}
	if r.IntN(3) > 0 {
		h.Recovery.QuarantinedSessions = []QuarantinedSession{}
		for range r.IntN(3) {
			h.Recovery.QuarantinedSessions = append(h.Recovery.QuarantinedSessions, QuarantinedSession{
				SessionID: randString(r), Generation: r.Int64N(100),
				RecoveryCondition: RecoveryCondition{State: randString(r), Code: randString(r), Retryable: r.IntN(2) == 0}})
		}
	}
	if r.IntN(2) == 0 {
		t1, t2 := randTime(r), randTime(r)
		h.Recovery.StartedAt, h.Recovery.CompletedAt = &t1, &t2
	}
	if r.IntN(2) == 0 {
		for range r.IntN(3) {
			a := AdapterState{Name: randString(r), Command: randString(r), State: randString(r), PID: r.IntN(3) * 1000,
				Restarts: r.IntN(5), LastFailure: randString(r)}
			if r.IntN(3) > 0 {
				a.Args = []string{randString(r), randString(r)}
				a.Capabilities = []string{randString(r)}
			}
			h.Adapters = append(h.Adapters, a)
		}
	}
	if r.IntN(4) > 0 {
		h.Sessions = []SessionSnapshot{}
		for range r.IntN(4) {
			h.Sessions = append(h.Sessions, randSession(r))
		}
	}
	return h
}

func encodingJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		resp := &Response{ProtocolVersion: randString(r), Kind: KindResponse, RequestID: randString(r),
			HostInstanceID: randString(r), SessionID: randString(r), OK: true}
		if r.IntN(2) == 0 {
			seq := r.Uint64()
			resp.Sequence = &seq
		}
		switch i % 3 {
		case 0:
			resp.Data = randHost(r)
		case 1:
			h := randHost(r)
			resp.Data = &h
		case 2:
			s := randSession(r)
			resp.Data = &s
		}
		got, ok := resp.AppendLine(nil)
		if !ok {
			t.Fatalf("case %d: no fast path for %T", i, resp.Data)
		}
		if want := encodingJSON(t, resp); !bytes.Equal(got, want) {
			t.Fatalf("case %d differs:\nfast %s\njson %s", i, got, want)
		}
	}
}

func TestAppendLineFallsBack(t *testing.T) {
	for _, resp := range []*Response{
		{Error: &Error{Code: "x"}},
		{OK: true, Data: OpenResult{}},
		{OK: true, Data: nil},
	} {
		if _, ok := resp.AppendLine(nil); ok {
			t.Errorf("fast path taken for %+v", resp)
		}
	}
}

// randJSON returns a random JSON text: nested values, awkward strings (as a peer could escape
// them), numbers, duplicate keys, and sometimes whitespace between tokens.
func randJSON(r *rand.Rand, depth int) string {
	sp := func() string {
		if r.IntN(6) == 0 {
			return []string{" ", "\n", "\t ", "\r\n  "}[r.IntN(4)]
		}
		return ""
	}
	str := func() string {
		s, _ := json.Marshal(randString(r))
		if r.IntN(4) == 0 {
			return `"esc\u0041\n\"\/\ud83d\ude00"`
		}
		return string(s)
	}
	k := r.IntN(8)
	if depth > 3 {
		k = r.IntN(4)
	}
	switch k {
	case 0:
		return str()
	case 1:
		return []string{"0", "-1.5e+7", "12345678901234567890", "3.25E-2"}[r.IntN(4)]
	case 2:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case 3:
		return "[]"
	case 4, 5:
		var sb strings.Builder
		sb.WriteString("{" + sp())
		for i := range r.IntN(4) {
			if i > 0 {
				sb.WriteString("," + sp())
			}
			key := str()
			if r.IntN(5) == 0 {
				key = `"dup"`
			}
			sb.WriteString(key + sp() + ":" + sp() + randJSON(r, depth+1) + sp())
		}
		sb.WriteString("}")
		return sb.String()
	default:
		var sb strings.Builder
		sb.WriteString("[" + sp())
		for i := range r.IntN(4) {
			if i > 0 {
				sb.WriteString("," + sp())
			}
			sb.WriteString(randJSON(r, depth+1) + sp())
		}
		sb.WriteString("]")
		return sb.String()
	}
}

func TestAppendToolResultMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		resp := &Response{ProtocolVersion: randString(r), Kind: KindResponse, RequestID: randString(r),
			HostInstanceID: randString(r), OK: true}
		if r.IntN(2) == 0 {
			resp.SessionID = randString(r)
		}
		tr := &ToolResult{ToolCallID: randString(r), Operation: randString(r)}
		switch r.IntN(10) {
		case 0: // nil data is null
		case 1:
			tr.Data = json.RawMessage(" " + randJSON(r, 0) + "\n")
		default:
			tr.Data = json.RawMessage(randJSON(r, 0))
		}
		if tr.Data != nil && r.IntN(2) == 0 {
			// What the tool-adapter connection returns: compact, and vouched for.
			var c bytes.Buffer
			if json.Compact(&c, tr.Data) != nil {
				t.Fatal("generated data is not JSON")
			}
			tr.Data = c.Bytes()
			resp.Data = &CompactToolResult{*tr}
		} else {
			resp.Data = tr
		}
		got, ok := resp.AppendLine(nil)
		if !ok {
			t.Fatalf("case %d: no fast path for %s", i, tr.Data)
		}
		if want := encodingJSON(t, resp); !bytes.Equal(got, want) {
			t.Fatalf("case %d differs:\nfast %s\njson %s", i, got, want)
		}
	}
}

// TestAppendToolResultFallsBack: data that is not one JSON value leaves the answer to
// encoding/json, which refuses it, and the buffer as it was.
func TestAppendToolResultFallsBack(t *testing.T) {
	for _, data := range []string{"", "{", `{"a":1}x`, `{"a":01}`, "nul", `["\x01"]`, `"\q"`} {
		resp := &Response{Kind: KindResponse, OK: true, Data: &ToolResult{ToolCallID: "c", Operation: "fs.read", Data: json.RawMessage(data)}}
		b, ok := resp.AppendLine([]byte("keep"))
		if ok || string(b) != "keep" {
			t.Errorf("data %q: fast path %v, buffer %q", data, ok, b)
		}
		var buf bytes.Buffer
		if json.NewEncoder(&buf).Encode(resp) == nil {
			t.Errorf("data %q: encoding/json accepts it", data)
		}
	}
}
