package model

import (
	"net/url"
	"strings"
)

// MaxProviderNameLen is the longest provider name ParseProviderFlag accepts.
const MaxProviderNameLen = 128

// FlagError reports a malformed --provider or --provider-key-env value. It names the part that
// is wrong and why, and never repeats the value itself: a mistyped flag may hold a secret.
type FlagError struct {
	// Flag is the syntax checked: "NAME=BASE_URL" or "NAME=ENV_VAR".
	Flag string
	// Part is "syntax", "name", "base URL" or "env var".
	Part   string
	Reason string
}

// Error names the flag syntax, the part and the reason.
func (e *FlagError) Error() string {
	return "invalid " + e.Flag + " value: " + e.Part + ": " + e.Reason
}

const (
	providerSyntax = "NAME=BASE_URL"
	keyEnvSyntax   = "NAME=ENV_VAR"
)

// ParseProviderFlag parses "NAME=BASE_URL". NAME matches [a-z0-9][a-z0-9._-]{0,127}.
// BASE_URL is an absolute http or https URL with a host, without user info, query or
// fragment, whose path ends in "/v1"; one trailing slash is accepted and trimmed from the
// returned baseURL. Every bad input returns a *FlagError.
func ParseProviderFlag(s string) (name, baseURL string, err error) {
	name, rest, err := splitFlag(providerSyntax, s)
	if err != nil {
		return "", "", err
	}
	fail := func(reason string) (string, string, error) {
		return "", "", &FlagError{Flag: providerSyntax, Part: "base URL", Reason: reason}
	}
	if rest == "" {
		return fail("empty")
	}
	u, perr := url.Parse(rest)
	switch {
	case perr != nil:
		// url.Error repeats the input, which may carry a password; keep only the class.
		return fail("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return fail("scheme must be http or https")
	case u.Opaque != "" || u.Host == "":
		return fail("must be absolute, with a host")
	case u.User != nil:
		return fail("must not contain user info; pass the key with NAME=ENV_VAR instead")
	case u.RawQuery != "" || u.ForceQuery:
		return fail("must not have a query")
	case u.Fragment != "" || strings.Contains(rest, "#"):
		return fail("must not have a fragment")
	}
	trimmed := strings.TrimSuffix(rest, "/")
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if !strings.HasSuffix(p, "/v1") || !strings.HasSuffix(trimmed, "/v1") {
		return fail(`path must end in "/v1"`)
	}
	return name, trimmed, nil
}

// ParseProviderKeyEnvFlag parses "NAME=ENV_VAR": the provider name as in ParseProviderFlag,
// and the name of the environment variable that holds its API key, matching
// [A-Za-z_][A-Za-z0-9_]*. Every bad input returns a *FlagError.
func ParseProviderKeyEnvFlag(s string) (name, envVar string, err error) {
	name, envVar, err = splitFlag(keyEnvSyntax, s)
	if err != nil {
		return "", "", err
	}
	if !validEnvName(envVar) {
		return "", "", &FlagError{Flag: keyEnvSyntax, Part: "env var", Reason: "must match [A-Za-z_][A-Za-z0-9_]*"}
	}
	return name, envVar, nil
}

// splitFlag splits at the first '=' and checks the provider name.
func splitFlag(syntax, s string) (name, rest string, err error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", &FlagError{Flag: syntax, Part: "syntax", Reason: "want " + syntax}
	}
	if !ValidProviderName(name) {
		return "", "", &FlagError{Flag: syntax, Part: "name", Reason: "must match [a-z0-9][a-z0-9._-]{0,127}"}
	}
	return name, rest, nil
}

// ValidProviderName reports whether s matches [a-z0-9][a-z0-9._-]{0,127}.
func ValidProviderName(s string) bool {
	if s == "" || len(s) > MaxProviderNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}
