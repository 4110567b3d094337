package validate

// This file owns how the tool-adapter harness reports: a probe's outcome, with the handle
// redacted from its detail, and how a sent request and an adapter's answer read in a failure.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/tooladapter"
)

func (h *toolHarness) pass(name, detail string) { h.add(Probe{Name: name, Pass: true, Detail: detail}) }
func (h *toolHarness) fail(name, detail string) { h.add(Probe{Name: name, Detail: detail}) }
func (h *toolHarness) skip(name, detail string) {
	h.add(Probe{Name: name, Pass: true, Skipped: true, Detail: detail})
}

// add records p. A detail never holds the handle, even if an adapter put it in an error code.
func (h *toolHarness) add(p Probe) {
	if len(h.handle) > 0 {
		p.Detail = strings.ReplaceAll(p.Detail, string(h.handle), "[redacted]")
	}
	h.rep.add(p)
}

func (h *toolHarness) result(name string, problems []string, note string) {
	if len(problems) == 0 {
		h.pass(name, note)
		return
	}
	if len(problems) > 8 {
		problems = append(problems[:8:8], fmt.Sprintf("and %d more", len(problems)-8))
	}
	h.fail(name, strings.Join(problems, "; "))
}

// maxSentText bounds the rendering of a request in a report.
const maxSentText = 240

// sentText renders a request as the harness sent it, the operation and its payload as compact
// JSON, for failure messages: an author must see which path and arguments failed.
func sentText(op string, payload any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if raw, ok := payload.(json.RawMessage); ok {
		buf.Write(raw)
	} else if enc.Encode(payload) != nil {
		return op
	}
	text := strings.TrimSpace(buf.String())
	if len(text) > maxSentText {
		cut := maxSentText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	return op + " " + text
}

func describeFrame(f *tooladapter.Frame, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case f.OK:
		return "ok"
	default:
		return "error " + f.Error.Code + " (" + quoteN(f.Error.Message, maxQuotedMessage) + ")"
	}
}
