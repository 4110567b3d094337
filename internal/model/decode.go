package model

import (
	"encoding/json"
	"fmt"
)

// limits bound what one response may make the client hold.
type limits struct {
	maxResponseBytes int64
	maxLineBytes     int
	maxToolCalls     int
	maxArgumentBytes int
}

// decodeCompletion decodes a whole (non-streaming) response body.
func decodeCompletion(body []byte, lim limits, s scrubber) (Response, error) {
	var w wireCompletion
	if err := json.Unmarshal(body, &w); err != nil {
		return Response{}, s.invalid("the response is not a JSON completion", err)
	}
	if len(w.Choices) == 0 {
		if hasError(w.Error) {
			return Response{}, s.inBodyError(w.Error)
		}
		return Response{}, s.invalid("the response has no choices", nil)
	}
	var choice *wireChoice
	for i := range w.Choices {
		if w.Choices[i].Index == 0 {
			choice = &w.Choices[i]
			break
		}
	}
	if choice == nil || choice.Message == nil {
		return Response{}, s.invalid("the response has no message in choice 0", nil)
	}
	m := choice.Message
	resp := Response{Message: Message{Role: RoleAssistant}}
	if m.Content != nil {
		resp.Message.Content = *m.Content
	}
	if choice.FinishReason != nil {
		resp.FinishReason = *choice.FinishReason
	}
	if w.Usage != nil {
		resp.Usage = w.Usage.usage()
	}
	if len(m.ToolCalls) > lim.maxToolCalls {
		return Response{}, s.invalid(fmt.Sprintf("the response has more than %d tool calls", lim.maxToolCalls), errTooLarge)
	}
	for i, wt := range m.ToolCalls {
		args, err := argumentsText(wt.Function.Arguments)
		if err != nil {
			return Response{}, s.invalid("invalid tool call", err)
		}
		if len(args) > lim.maxArgumentBytes {
			return Response{}, s.invalid(fmt.Sprintf("tool call arguments are longer than %d bytes", lim.maxArgumentBytes), errTooLarge)
		}
		tc := ToolCall{ID: wt.ID, Name: wt.Function.Name, Arguments: args}
		if err := finishToolCall(&tc, i); err != nil {
			return Response{}, s.invalid("invalid tool call", err)
		}
		resp.Message.ToolCalls = append(resp.Message.ToolCalls, tc)
	}
	return resp, nil
}

// emitResponse reports a whole response through onDelta, as a stream would have.
func emitResponse(resp Response, onDelta func(Delta)) {
	if onDelta == nil {
		return
	}
	if resp.Message.Content != "" {
		onDelta(Delta{Text: resp.Message.Content})
	}
	for i, tc := range resp.Message.ToolCalls {
		onDelta(Delta{ToolCallIndex: i, ToolCallID: tc.ID, ToolCallName: tc.Name})
	}
}

// inBodyError maps an error a provider reported inside a 200 response or a stream. Its
// "code", when it is an HTTP status, decides the class, as if the provider had answered
// with that status; otherwise the failure is taken as the server's and retryable.
func (s scrubber) inBodyError(raw json.RawMessage) *Error {
	if status := providerErrorStatus(raw); status != 0 {
		return s.statusError(status, 0, providerErrorText(raw), true)
	}
	msg := "reported an error"
	if t := cleanProviderText(s.text(providerErrorText(raw))); t != "" {
		msg += ": " + t
	}
	return s.newError(CodeUnavailable, true, 0, msg, nil)
}
