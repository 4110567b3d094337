package capadapter

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/ndjson"
)

// Descriptor bounds.
const (
	// MaxCapabilities is the most descriptors one adapter may list.
	MaxCapabilities = 8
	// MaxDescriptorBytes bounds one descriptor, compactly encoded.
	MaxDescriptorBytes = 1024
	// MaxActions bounds the actions of one descriptor.
	MaxActions = 4
	// MaxProperties bounds the input properties of one action.
	MaxProperties = 16
	// MaxTitleRunes and MaxVersionRunes bound the descriptor's (and actions') title and version.
	MaxTitleRunes   = 64
	MaxVersionRunes = 32
	// MaxActionBytes bounds an action name.
	MaxActionBytes = 32
)

// Primitive property types of an action input.
const (
	TypeString  = "string"
	TypeNumber  = "number"
	TypeBoolean = "boolean"
)

var (
	capabilityIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._:-]{0,63}$`)
	actionNamePattern   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	propertyNamePattern = regexp.MustCompile(`^[a-z][a-zA-Z0-9_]{0,31}$`)
	// sensitiveNamePattern refuses names that suggest an endpoint, a credential or transport
	// detail: no action, property or result key may look like one.
	sensitiveNamePattern = regexp.MustCompile(`(?i)(endpoint|url|credential|password|secret|token|adapter|protocol|hostname|authorization|cookie|method|path|accesskey)`)
	// unsafePayloadPattern is screened against the raw list, describe, observe and invoke
	// results as an early reject, and against every decoded key and string of them (the
	// screen proper): a URL anywhere, or a sensitive key followed by ':' or '='.
	unsafePayloadPattern = regexp.MustCompile(`(?i)(https?://|"?(endpoint|url|credential|password|secret|token|authorization|cookie|adapter|protocol|hostname|accesskey)"?\s*[:=])`)
	urlPattern           = regexp.MustCompile(`(?i)https?://`)
)

// Descriptor is an adapter's semantic projection of one capability.
type Descriptor struct {
	CapabilityID string   `json:"capabilityId"`
	Title        string   `json:"title"`
	Version      string   `json:"version"`
	Observe      bool     `json:"observe"`
	Actions      []Action `json:"actions"`
}

// Action is one invokable action of a capability.
type Action struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Input Input  `json:"input"`
}

// Input is an action's closed object schema: property name → primitive type, and the names
// that must be present.
type Input struct {
	Type       string            `json:"type"`
	Properties map[string]string `json:"properties"`
	Required   []string          `json:"required,omitempty"`
}

// descriptorWire catches absent members, which the zero values of Descriptor would hide.
type descriptorWire struct {
	CapabilityID *string      `json:"capabilityId"`
	Title        *string      `json:"title"`
	Version      *string      `json:"version"`
	Observe      *bool        `json:"observe"`
	Actions      []actionWire `json:"actions"`
}

type actionWire struct {
	Name  *string    `json:"name"`
	Title *string    `json:"title"`
	Input *inputWire `json:"input"`
}

type inputWire struct {
	Type       *string           `json:"type"`
	Properties map[string]string `json:"properties"`
	Required   []string          `json:"required"`
}

func invalidDescriptor(detail string) *Error { return newError(CodeInvalidDescriptor, detail) }

// ParseDescriptor strictly decodes and validates one descriptor and returns it with its
// canonical encoding (compact, members in declaration order, properties sorted), which is
// what byte-identical comparisons use. Errors are invalid_descriptor, or too_large for a
// descriptor over MaxDescriptorBytes; they never quote the descriptor.
//
// The raw-byte screen here is only an early reject: ValidateDescriptor screens the decoded
// text, which is what a client sees.
func ParseDescriptor(data []byte) (Descriptor, []byte, error) {
	if unsafePayload(data) {
		return Descriptor{}, nil, invalidDescriptor("descriptor carries a URL or a sensitive key")
	}
	var w descriptorWire
	if err := ndjson.Decode(data, &w, ndjson.Closed); err != nil {
		return Descriptor{}, nil, invalidDescriptor("descriptor is not a strict descriptor object")
	}
	if w.CapabilityID == nil || w.Title == nil || w.Version == nil || w.Observe == nil || w.Actions == nil {
		return Descriptor{}, nil, invalidDescriptor("descriptor lacks one of capabilityId, title, version, observe, actions")
	}
	d := Descriptor{CapabilityID: *w.CapabilityID, Title: *w.Title, Version: *w.Version, Observe: *w.Observe, Actions: []Action{}}
	for _, aw := range w.Actions {
		if aw.Name == nil || aw.Title == nil || aw.Input == nil || aw.Input.Type == nil || aw.Input.Properties == nil {
			return Descriptor{}, nil, invalidDescriptor("action lacks one of name, title, input.type, input.properties")
		}
		a := Action{Name: *aw.Name, Title: *aw.Title, Input: Input{Type: *aw.Input.Type, Properties: aw.Input.Properties, Required: aw.Input.Required}}
		if len(a.Input.Required) == 0 {
			a.Input.Required = nil
		}
		d.Actions = append(d.Actions, a)
	}
	if err := ValidateDescriptor(d); err != nil {
		return Descriptor{}, nil, err
	}
	canon, err := canonicalDescriptor(d)
	if err != nil {
		return Descriptor{}, nil, err
	}
	return d, canon, nil
}

func canonicalDescriptor(d Descriptor) ([]byte, error) {
	canon, err := json.Marshal(&d) // map keys sort; <, > and & are escaped, as the bound is measured
	if err != nil {
		return nil, invalidDescriptor("descriptor is not serializable")
	}
	if len(canon) > MaxDescriptorBytes {
		return nil, descriptorTooLarge(len(canon))
	}
	return canon, nil
}

// ValidateDescriptor checks d against the descriptor rules: the id, name and property
// grammars, title and version text, the counts, the primitive types, required names, the
// sensitive-name screen, the URL and sensitive key:value screen of every string (as decoded
// text, the way a client sees it), and the encoded size.
func ValidateDescriptor(d Descriptor) error {
	if unsafeDescriptorText(&d) {
		return invalidDescriptor("descriptor text carries a URL or a sensitive key")
	}
	if !capabilityIDPattern.MatchString(d.CapabilityID) {
		return invalidDescriptor("capabilityId does not match " + capabilityIDPattern.String())
	}
	if !validText(d.Title, MaxTitleRunes) {
		return invalidDescriptor("title must be 1 to 64 characters of trimmed text without control characters or URLs")
	}
	if !validText(d.Version, MaxVersionRunes) {
		return invalidDescriptor("version must be 1 to 32 characters of trimmed text without control characters or URLs")
	}
	if d.Actions == nil {
		return invalidDescriptor("actions must be an array")
	}
	if len(d.Actions) > MaxActions {
		return invalidDescriptor("more than 4 actions")
	}
	names := make([]string, 0, len(d.Actions))
	for _, a := range d.Actions {
		if !actionNamePattern.MatchString(a.Name) || sensitiveName(a.Name) {
			return invalidDescriptor("an action name does not match " + actionNamePattern.String() + " or is sensitive")
		}
		if slices.Contains(names, a.Name) {
			return invalidDescriptor("duplicate action name")
		}
		names = append(names, a.Name)
		if !validText(a.Title, MaxTitleRunes) {
			return invalidDescriptor("an action title must be 1 to 64 characters of trimmed text")
		}
		if a.Input.Type != "object" {
			return invalidDescriptor(`an action input type is not "object"`)
		}
		if a.Input.Properties == nil {
			return invalidDescriptor("an action input has no properties object")
		}
		if len(a.Input.Properties) > MaxProperties {
			return invalidDescriptor("an action input has more than 16 properties")
		}
		for name, typ := range a.Input.Properties {
			if !propertyNamePattern.MatchString(name) || sensitiveName(name) {
				return invalidDescriptor("a property name does not match " + propertyNamePattern.String() + " or is sensitive")
			}
			if typ != TypeString && typ != TypeNumber && typ != TypeBoolean {
				return invalidDescriptor("a property type is not string, number or boolean")
			}
		}
		for i, r := range a.Input.Required {
			if _, ok := a.Input.Properties[r]; !ok {
				return invalidDescriptor("a required name is not a property")
			}
			if slices.Contains(a.Input.Required[:i], r) {
				return invalidDescriptor("a required name is listed twice")
			}
		}
	}
	canon, err := json.Marshal(&d)
	if err != nil {
		return invalidDescriptor("descriptor is not serializable")
	}
	if len(canon) > MaxDescriptorBytes {
		return descriptorTooLarge(len(canon))
	}
	return nil
}

// descriptorTooLarge says how large a descriptor is as it is measured: an author whose own
// compact JSON is within the bound learns why it is not.
func descriptorTooLarge(n int) *Error {
	return newError(CodeTooLarge, "descriptor is "+strconv.Itoa(n)+" bytes, over "+strconv.Itoa(MaxDescriptorBytes)+
		`, encoded compactly with <, > and & escaped as \u003c, \u003e and \u0026`)
}

// unsafeDescriptorText reports whether any string of d fails unsafeText.
func unsafeDescriptorText(d *Descriptor) bool {
	if unsafeText(d.CapabilityID) || unsafeText(d.Title) || unsafeText(d.Version) {
		return true
	}
	for _, a := range d.Actions {
		if unsafeText(a.Name) || unsafeText(a.Title) || unsafeText(a.Input.Type) {
			return true
		}
		for name, typ := range a.Input.Properties {
			if unsafeText(name) || unsafeText(typ) {
				return true
			}
		}
		for _, r := range a.Input.Required {
			if unsafeText(r) {
				return true
			}
		}
	}
	return false
}

// validText: non-empty, at most maxRunes runes, trimmed, valid UTF-8, no control characters
// and no URL.
func validText(s string, maxRunes int) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > maxRunes || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return !urlPattern.MatchString(s)
}

// Action returns the action called name, if d declares it.
func (d *Descriptor) Action(name string) (Action, bool) {
	for _, a := range d.Actions {
		if a.Name == name {
			return a, true
		}
	}
	return Action{}, false
}

// ValidateArgs checks invoke args against an action's declared input: at most MaxArgsBytes,
// one strict JSON object (no duplicate keys), every required name present, no undeclared
// name, each value of its declared primitive type (null is no type), and no URL in a string
// once decoded (an escaped "https:\/\/" is a URL). It fails with too_large or invalid_args.
// An invalid_args names the argument and what it must be, so that a model can correct it:
// the names and types are the descriptor's, which the operator approved and the descriptor
// rules screen. It never quotes the args, not even an undeclared name (it lists the declared
// ones instead). Arguments are checked in name order, so the error is the same every time.
func ValidateArgs(in Input, args json.RawMessage) error {
	if len(args) > MaxArgsBytes {
		return newError(CodeTooLarge, "args exceed 1024 bytes")
	}
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(args)) == 0 || ndjson.Decode(args, &obj, ndjson.Closed) != nil || obj == nil {
		return newError(CodeInvalidArgs, "args must be one JSON object without duplicate keys")
	}
	for _, r := range in.Required {
		if _, ok := obj[r]; !ok {
			return newError(CodeInvalidArgs, "required argument "+strconv.Quote(r)+" is missing: it must be "+typeWords(in.Properties[r]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		v := obj[k]
		typ, ok := in.Properties[k]
		if !ok {
			return newError(CodeInvalidArgs, "an argument is not declared by the action, which takes "+declared(in))
		}
		if !primitiveOf(v, typ) {
			return newError(CodeInvalidArgs, "argument "+strconv.Quote(k)+" must be "+typeWords(typ))
		}
		if typ == TypeString {
			var text string
			if json.Unmarshal(v, &text) != nil {
				return newError(CodeInvalidArgs, "argument "+strconv.Quote(k)+" must be "+typeWords(typ))
			}
			if urlPattern.MatchString(text) {
				return newError(CodeInvalidArgs, "argument "+strconv.Quote(k)+" must not carry a URL")
			}
		}
	}
	return nil
}

// typeWords says what a value of a declared primitive type is, for an error.
func typeWords(typ string) string {
	switch typ {
	case TypeString:
		return "a string"
	case TypeNumber:
		return "a number"
	case TypeBoolean:
		return "true or false"
	}
	return "of its declared type"
}

// declared lists an input's arguments for an error: `"level" (a number), "on" (true or
// false, required)`, in name order, or "no arguments".
func declared(in Input) string {
	if len(in.Properties) == 0 {
		return "no arguments"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(in.Properties)) {
		p := strconv.Quote(k) + " (" + typeWords(in.Properties[k])
		if slices.Contains(in.Required, k) {
			p += ", required"
		}
		parts = append(parts, p+")")
	}
	return strings.Join(parts, ", ")
}

func primitiveOf(v json.RawMessage, typ string) bool {
	if len(v) == 0 {
		return false
	}
	switch typ {
	case TypeString:
		return v[0] == '"'
	case TypeBoolean:
		return string(v) == "true" || string(v) == "false"
	case TypeNumber:
		if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
			return false
		}
		f, err := strconv.ParseFloat(string(v), 64)
		return err == nil && !math.IsInf(f, 0)
	}
	return false
}

// Semantic result bounds: what an observe or invoke result may be, beyond MaxResultBytes.
const (
	maxResultDepth   = 4
	maxResultEntries = 32
	maxResultKeyLen  = 64
)

// checkResult screens an observe or invoke result: at most MaxResultBytes, one strict JSON
// value, no URL or sensitive key:value text in any decoded key or string (the raw-byte screen
// is only an early reject), nesting at most 4 deep, arrays and objects of at most 32 entries,
// keys of at most 64 characters that are not sensitive names, finite numbers. Results are
// semantic data: anything else fails closed.
func checkResult(raw json.RawMessage) error { return ScreenResult(raw, true) }

// ScreenResult is checkResult. With strict false it skips the strict-JSON check, for a result
// that DecodeResponse took from a frame it has just checked whole: syntax, and duplicate keys
// at every depth. Every other screen still applies.
//
// The outcomes differ in what they say of the adapter. A result over MaxResultBytes is
// too_large and one that is not strict JSON malformed_response: the adapter broke the
// protocol, and the runtime kills it. A well-formed result that fails a screen is
// result_withheld, with Error.Screen naming the first screen it failed in document order
// (ScreenURL, ScreenSensitiveText, ScreenSensitiveKey, ScreenShape): the runtime withholds
// that one result and the adapter serves on. No error quotes the result.
func ScreenResult(raw json.RawMessage, strict bool) error {
	if len(raw) > MaxResultBytes {
		return newError(CodeTooLarge, "result exceeds 4096 bytes")
	}
	if strict && ndjson.Valid(raw) != nil {
		return newError(CodeMalformedResponse, "result is not strict JSON")
	}
	sc := semanticScanner{data: raw}
	if unsafePayload(raw) {
		// The raw bytes carry a URL or a sensitive key:value: an early reject, which the
		// decoded scan below classifies. Should it find nothing, the raw match still decides.
		if sc.value(0) {
			sc.screen = unsafeScreen(raw)
		}
		return withheld(sc.screen)
	}
	if !sc.value(0) {
		return withheld(sc.screen)
	}
	return nil
}

// Result screens: the names a result_withheld error gives for the screen a result failed, for
// the operator. They are stable: logs, status and the documentation use them.
const (
	// ScreenURL: a decoded key or string holds http:// or https:// (any case).
	ScreenURL = "url"
	// ScreenSensitiveText: a decoded key or string holds a sensitive word (endpoint, url,
	// credential, password, secret, token, authorization, cookie, adapter, protocol,
	// hostname, accesskey; any case) followed by an optional quote, optional white space and
	// ':' or '=', as unsafePayloadPattern says.
	ScreenSensitiveText = "sensitive_text"
	// ScreenSensitiveKey: an object key holds a sensitive name anywhere in it
	// (sensitiveNamePattern: the words above, method and path).
	ScreenSensitiveKey = "sensitive_key"
	// ScreenShape: nesting deeper than 4, an array or object of more than 32 entries, a key
	// longer than 64 code points, or a number that is not finite.
	ScreenShape = "shape"
)

func withheld(screen string) *Error {
	return &Error{Code: CodeResultWithheld, Screen: screen,
		Detail: "the call ran, but its result was withheld: it failed the runtime's " + screen + " screen"}
}

// unsafeScreen names the screen of text that unsafePayload matched: url or sensitive_text.
func unsafeScreen[T text](b T) string {
	if urlPattern.Match([]byte(b)) {
		return ScreenURL
	}
	return ScreenSensitiveText
}

// semanticScanner walks a JSON value that ndjson.Valid accepted, checking the semantic
// bounds of checkResult without building it in memory. When value fails, screen names the
// screen that failed.
type semanticScanner struct {
	data   []byte
	pos    int
	screen string
}

// fail records screen as the failure and returns false.
func (sc *semanticScanner) fail(screen string) bool {
	sc.screen = screen
	return false
}

func (sc *semanticScanner) skipSpace() {
	for sc.pos < len(sc.data) && isRegexpSpace(sc.data[sc.pos]) {
		sc.pos++
	}
}

// value checks the value at pos, nested in depth containers, and moves past it.
func (sc *semanticScanner) value(depth int) bool {
	sc.skipSpace()
	switch c := sc.data[sc.pos]; {
	case c == '{' || c == '[':
		if depth >= maxResultDepth {
			return sc.fail(ScreenShape)
		}
		sc.pos++
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		for n := 0; ; n++ {
			sc.skipSpace()
			if sc.data[sc.pos] == closer {
				sc.pos++
				return true
			}
			if sc.data[sc.pos] == ',' {
				sc.pos++
				sc.skipSpace()
			}
			if n == maxResultEntries {
				return sc.fail(ScreenShape)
			}
			if c == '{' {
				key := sc.text()
				switch {
				case unsafePayload(key):
					return sc.fail(unsafeScreen(key))
				case sensitiveName(key):
					return sc.fail(ScreenSensitiveKey)
				case utf8.RuneCount(key) > maxResultKeyLen:
					return sc.fail(ScreenShape)
				}
				sc.skipSpace()
				sc.pos++ // ':'
			}
			if !sc.value(depth + 1) {
				return false
			}
		}
	case c == '"':
		if t := sc.text(); unsafePayload(t) {
			return sc.fail(unsafeScreen(t))
		}
	case c == 't':
		sc.pos += 4
	case c == 'f':
		sc.pos += 5
	case c == 'n':
		sc.pos += 4
	default:
		start := sc.pos
		for sc.pos < len(sc.data) && strings.IndexByte("+-.0123456789eE", sc.data[sc.pos]) >= 0 {
			sc.pos++
		}
		if f, err := strconv.ParseFloat(string(sc.data[start:sc.pos]), 64); err != nil || math.IsInf(f, 0) {
			return sc.fail(ScreenShape)
		}
	}
	return true
}

// text returns the decoded text of the string at pos and moves past it: the raw bytes
// between the quotes when the string has no escape (they are then the decoded text, and are
// not copied), else the string decoded as a client would decode it.
func (sc *semanticScanner) text() []byte {
	start := sc.pos
	escaped := false
	for sc.pos++; sc.data[sc.pos] != '"'; sc.pos++ {
		if sc.data[sc.pos] == '\\' {
			escaped = true
			sc.pos++
		}
	}
	sc.pos++
	if !escaped {
		return sc.data[start+1 : sc.pos-1]
	}
	var s string
	_ = json.Unmarshal(sc.data[start:sc.pos], &s)
	return []byte(s)
}
