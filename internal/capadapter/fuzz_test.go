package capadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"unicode/utf8"
)

// referenceCheckResult is checkResult written the obvious way (regexps, a decoded tree), the
// differential reference for the hand-written scanners.
func referenceCheckResult(raw []byte) string {
	if len(raw) > MaxResultBytes {
		return CodeTooLarge
	}
	if validStrict(raw) != nil {
		return CodeMalformedResponse
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return CodeMalformedResponse
	}
	if unsafePayloadPattern.Match(raw) || !referenceSemantic(v, 0, sensitiveNamePattern) {
		return CodeResultWithheld
	}
	return ""
}

func referenceSemantic(v any, depth int, sensitive *regexp.Regexp) bool {
	switch x := v.(type) {
	case map[string]any:
		if depth >= maxResultDepth || len(x) > maxResultEntries {
			return false
		}
		for k, e := range x {
			if utf8.RuneCountInString(k) > maxResultKeyLen || sensitive.MatchString(k) || unsafePayloadPattern.MatchString(k) ||
				!referenceSemantic(e, depth+1, sensitive) {
				return false
			}
		}
	case []any:
		if depth >= maxResultDepth || len(x) > maxResultEntries {
			return false
		}
		for _, e := range x {
			if !referenceSemantic(e, depth+1, sensitive) {
				return false
			}
		}
	case string:
		return !unsafePayloadPattern.MatchString(x)
	case json.Number:
		f, err := x.Float64()
		return err == nil && !math.IsInf(f, 0)
	}
	return true
}

// decodedTextUnsafe reports whether any key or string of the JSON value data, decoded as a
// client decodes it, matches unsafePayloadPattern.
func decodedTextUnsafe(data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if unsafePayloadPattern.MatchString(k) || walk(e) {
					return true
				}
			}
		case []any:
			for _, e := range x {
				if walk(e) {
					return true
				}
			}
		case string:
			return unsafePayloadPattern.MatchString(x)
		}
		return false
	}
	return walk(v)
}

// decodedURL reports whether any key or string of the JSON value data, decoded, holds a URL.
func decodedURL(data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if urlPattern.MatchString(k) || walk(e) {
					return true
				}
			}
		case []any:
			return slices.ContainsFunc(x, walk)
		case string:
			return urlPattern.MatchString(x)
		}
		return false
	}
	return walk(v)
}

// escapeSeeds are inputs whose unsafe text hides behind JSON escapes.
var escapeSeeds = []string{
	`{"capabilityId":"my.url\u003a1","title":"X","version":"1","observe":true,"actions":[]}`,
	`{"capabilityId":"x","title":"Token\u003a x","version":"1","observe":true,"actions":[]}`,
	`{"capabilityId":"x","title":"see HtTpS:\/\/evil","version":"1","observe":true,"actions":[]}`,
	`{"capabilityId":"x","title":"\ud83d\ude00 http:\u002f\u002fx","version":"1","observe":true,"actions":[]}`,
	`{"capabilityId":"x","title":"a token\": b","version":"1","observe":true,"actions":[]}`,
	`{"capabilityId":"x","title":"\u017fecret= b","version":"1","observe":true,"actions":[]}`,
}

// FuzzDecodeResponse checks DecodeResponse's contract on arbitrary frames: an accepted frame
// is valid JSON answering exactly the outstanding id with exactly one of a strict result or a
// closed-set code, and re-encodes to a frame that decodes the same; a refused frame is
// always malformed_response and never claimed to come from the adapter.
func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{
		`{"protocolVersion":1,"id":"1","result":[]}`,
		`{"protocolVersion":1,"id":"1","result":{"brightness":42}}`,
		`{"protocolVersion":1,"id":"1","result":null}`,
		`{"protocolVersion":1,"id":"1","error":{"code":"unsupported_action"}}`,
		`{"protocolVersion":1,"id":"1","error":{"code":"bogus"}}`,
		`{"protocolVersion":2,"id":"1","result":1}`,
		`{"protocolVersion":1,"id":"2","result":1}`,
		`{"protocolVersion":1,"id":"1","result":1,"error":{"code":"internal"}}`,
		`{"protocolVersion":1,"id":"1","id":"1","result":1}`,
		`not-json`,
		`{"protocolVersion":1,"id":"1","result":{"note":"https:\/\/evil.example/x"}}`,
		`{"protocolVersion":1,"id":"1","result":["password\u003d hunter2"]}`,
		`{"protocolVersion":1,"id":"1","result":{"HTTP\u003a\u002F\u002Fx":"\ud83d\ude00"}}`,
		`{"protocolVersion":1,"id":"1","result":{"note":"a secret\" = b"}}`,
	} {
		f.Add([]byte(s), "1")
	}
	f.Fuzz(func(t *testing.T, frame []byte, id string) {
		resp, err := DecodeResponse(frame, id)
		if err != nil {
			e, ok := err.(*Error)
			if !ok || e.Code != CodeMalformedResponse || e.FromAdapter {
				t.Fatalf("refusal %v is not a local malformed_response", err)
			}
			return
		}
		if !json.Valid(frame) {
			t.Fatalf("accepted invalid JSON %q", frame)
		}
		if id == "" || resp.ID != id {
			t.Fatalf("accepted id %q for %q", resp.ID, id)
		}
		if (resp.Result == nil) == (resp.ErrorCode == "") {
			t.Fatalf("accepted %+v: want exactly one of result and error", resp)
		}
		if resp.ErrorCode != "" && !IsProtocolCode(resp.ErrorCode) {
			t.Fatalf("accepted code %q", resp.ErrorCode)
		}
		if resp.Result != nil && validStrict(resp.Result) != nil {
			t.Fatalf("accepted a result that is not strict JSON: %q", resp.Result)
		}
		if resp.Result != nil {
			got, want := CodeOf(checkResult(resp.Result)), referenceCheckResult(resp.Result)
			if got != want {
				t.Fatalf("checkResult(%q) = %q, reference %q", resp.Result, got, want)
			}
			if got == "" && decodedTextUnsafe(resp.Result) {
				t.Fatalf("checkResult accepted unsafe decoded text in %q", resp.Result)
			}
			if got == CodeResultWithheld {
				var e *Error
				_ = errors.As(checkResult(resp.Result), &e)
				switch e.Screen {
				case ScreenURL:
					if !urlPattern.Match(resp.Result) && !decodedURL(resp.Result) {
						t.Fatalf("checkResult(%q) names the url screen, but the result holds no URL", resp.Result)
					}
				case ScreenSensitiveText, ScreenSensitiveKey, ScreenShape:
				default:
					t.Fatalf("checkResult(%q) names screen %q", resp.Result, e.Screen)
				}
			}
		}
		env := map[string]any{"protocolVersion": 1, "id": resp.ID}
		if resp.Result != nil {
			env["result"] = resp.Result
		} else {
			env["error"] = map[string]string{"code": resp.ErrorCode}
		}
		again, _ := json.Marshal(env)
		resp2, err := DecodeResponse(again, id)
		if err != nil || resp2.ErrorCode != resp.ErrorCode || (resp.Result != nil && !jsonEqual(resp.Result, resp2.Result)) {
			t.Fatalf("re-encoded %s decodes to %+v, %v", again, resp2, err)
		}
	})
}

// jsonEqual reports whether a and b hold the same JSON value. Bytes may differ: re-encoding
// escapes "&", "<" and ">" as \u0026 and so on, which decode to the same text.
func jsonEqual(a, b []byte) bool {
	decode := func(data []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		return v, dec.Decode(&v) == nil
	}
	va, okA := decode(a)
	vb, okB := decode(b)
	return okA && okB && reflect.DeepEqual(va, vb)
}

// FuzzValidateDescriptor checks ParseDescriptor and ValidateDescriptor on arbitrary input: an
// accepted descriptor validates, its canonical form is bounded, free of URLs and sensitive
// key text, and a fixed point of parsing, and args built from its declared input pass
// ValidateArgs; a refusal is invalid_descriptor or too_large.
func FuzzValidateDescriptor(f *testing.F) {
	for _, s := range []string{
		`{"capabilityId":"living_room_light","title":"Living room light","version":"1","observe":true,"actions":[{"name":"set_led","title":"Set color","input":{"type":"object","properties":{"color":"string"},"required":["color"]}}]}`,
		`{"capabilityId":"printer_status","title":"Printer status","version":"1","observe":true,"actions":[]}`,
		`{"capabilityId":"test_light","title":"Test light","version":"1","observe":false,"actions":[{"name":"turn_on","title":"Turn on","input":{"type":"object","properties":{"on":"boolean","level":"number"},"required":["on"]}}]}`,
		`{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[{"name":"a","title":"A","input":{"type":"object","properties":{"endpoint":"string"}}}]}`,
		`{"capabilityId":"x","title":"https://x","version":"1","observe":true,"actions":[]}`,
		`{"capabilityId":"x","title":"X","version":"1","observe":true,"actions":[],"extra":1}`,
		`{"capabilityId":"X","title":"X","version":"1","observe":true,"actions":[]}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range escapeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The hand-written screens agree with the regular expressions they stand for.
		if unsafePayload(data) != unsafePayloadPattern.Match(data) {
			t.Fatalf("unsafePayload(%q) disagrees with its regexp", data)
		}
		if sensitiveName(string(data)) != sensitiveNamePattern.MatchString(string(data)) {
			t.Fatalf("sensitiveName(%q) disagrees with its regexp", data)
		}
		d, canon, err := ParseDescriptor(data)
		if err != nil {
			if c := CodeOf(err); c != CodeInvalidDescriptor && c != CodeTooLarge {
				t.Fatalf("refusal with code %s", c)
			}
			return
		}
		if err := ValidateDescriptor(d); err != nil {
			t.Fatalf("accepted descriptor fails ValidateDescriptor: %v", err)
		}
		if len(canon) > MaxDescriptorBytes || unsafePayloadPattern.Match(canon) {
			t.Fatalf("canonical form out of bounds or unsafe: %s", canon)
		}
		if decodedTextUnsafe(data) || decodedTextUnsafe(canon) {
			t.Fatalf("accepted descriptor carries unsafe decoded text: %q", data)
		}
		_, canon2, err := ParseDescriptor(canon)
		if err != nil || !bytes.Equal(canon, canon2) {
			t.Fatalf("canonical form is not a fixed point: %s → %s, %v", canon, canon2, err)
		}
		for _, a := range d.Actions {
			args := map[string]any{}
			for name, typ := range a.Input.Properties {
				switch typ {
				case TypeString:
					args[name] = "v"
				case TypeNumber:
					args[name] = 1.5
				case TypeBoolean:
					args[name] = true
				}
			}
			raw, _ := json.Marshal(args)
			if len(raw) <= MaxArgsBytes {
				if err := ValidateArgs(a.Input, raw); err != nil {
					t.Fatalf("args %s for a declared input refused: %v", raw, err)
				}
			}
			if len(a.Input.Required) > 0 {
				if err := ValidateArgs(a.Input, json.RawMessage(`{}`)); CodeOf(err) != CodeInvalidArgs {
					t.Fatalf("missing required args accepted: %v", err)
				}
			}
		}
	})
}

// FuzzValidateArgs checks that args ValidateArgs accepts carry no URL in any string, decoded
// as the adapter decodes it, and are one object of the declared keys.
func FuzzValidateArgs(f *testing.F) {
	for _, s := range []string{
		`{"label":"kitchen","level":3,"on":true}`,
		`{"label":"https:\/\/evil.example/x"}`,
		`{"label":"HTTP:\u002f\u002fx"}`,
		`{"l\u0061bel":"\ud83d\ude00 hTtP:\/\/x"}`,
		`{"label":"a\/b"}`,
	} {
		f.Add([]byte(s))
	}
	in := Input{Type: "object", Properties: map[string]string{"on": "boolean", "level": "number", "label": "string"}}
	f.Fuzz(func(t *testing.T, args []byte) {
		if ValidateArgs(in, args) != nil {
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
			t.Fatalf("accepted args that are not an object: %q", args)
		}
		for k, v := range obj {
			if _, ok := in.Properties[k]; !ok {
				t.Fatalf("accepted undeclared key %q", k)
			}
			if s, ok := v.(string); ok && urlPattern.MatchString(s) {
				t.Fatalf("accepted a URL in %q", args)
			}
		}
	})
}
