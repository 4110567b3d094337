package model

import (
	"errors"
	"strings"
	"testing"
)

func TestParseProviderFlag(t *testing.T) {
	good := []struct {
		name, in, wantName, wantURL string
	}{
		{"openai", "openai=https://api.openai.com/v1", "openai", "https://api.openai.com/v1"},
		{"trailing slash trimmed", "ollama=http://127.0.0.1:11434/v1/", "ollama", "http://127.0.0.1:11434/v1"},
		{"nested path", "router=https://openrouter.ai/api/v1", "router", "https://openrouter.ai/api/v1"},
		{"ipv6 host", "local=http://[::1]:8080/v1", "local", "http://[::1]:8080/v1"},
		{"name punctuation", "a.b_c-9=http://h/v1", "a.b_c-9", "http://h/v1"},
		{"digit first", "9=http://h/v1", "9", "http://h/v1"},
		{"longest name", strings.Repeat("a", 128) + "=http://h/v1", strings.Repeat("a", 128), "http://h/v1"},
		{"upper-case scheme", "x=HTTP://h/v1", "x", "HTTP://h/v1"},
		{"equals in path", "x=http://h/a=b/v1", "x", "http://h/a=b/v1"},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			name, u, err := ParseProviderFlag(tc.in)
			if err != nil || name != tc.wantName || u != tc.wantURL {
				t.Fatalf("ParseProviderFlag(%q) = %q, %q, %v; want %q, %q", tc.in, name, u, err, tc.wantName, tc.wantURL)
			}
		})
	}

	bad := []struct {
		name, in, part string
	}{
		{"empty", "", "syntax"},
		{"no equals", "openai", "syntax"},
		{"empty name", "=http://h/v1", "name"},
		{"upper-case name", "OpenAI=http://h/v1", "name"},
		{"name starts with dot", ".x=http://h/v1", "name"},
		{"name starts with dash", "-x=http://h/v1", "name"},
		{"name starts with underscore", "_x=http://h/v1", "name"},
		{"name with space", "a b=http://h/v1", "name"},
		{"name with slash", "a/b=http://h/v1", "name"},
		{"name non-ASCII", "é=http://h/v1", "name"},
		{"name too long", strings.Repeat("a", 129) + "=http://h/v1", "name"},
		{"empty url", "x=", "base URL"},
		{"relative url", "x=/v1", "base URL"},
		{"no scheme", "x=h/v1", "base URL"},
		{"ftp scheme", "x=ftp://h/v1", "base URL"},
		{"unix scheme", "x=unix:///run/x/v1", "base URL"},
		{"no host", "x=http:///v1", "base URL"},
		{"opaque", "x=http:h/v1", "base URL"},
		{"user info", "x=http://u@h/v1", "base URL"},
		{"user and password", "x=https://u:secretpw@h/v1", "base URL"},
		{"query", "x=http://h/v1?k=v", "base URL"},
		{"empty query", "x=http://h/v1?", "base URL"},
		{"fragment", "x=http://h/v1#f", "base URL"},
		{"empty fragment", "x=http://h/v1#", "base URL"},
		{"no v1", "x=http://h/", "base URL"},
		{"no path", "x=http://h", "base URL"},
		{"v2", "x=http://h/v2", "base URL"},
		{"v1 not last", "x=http://h/v1/chat", "base URL"},
		{"v1 suffix of segment", "x=http://h/apiv1", "base URL"},
		{"two trailing slashes", "x=http://h/v1//", "base URL"},
		{"escaped v1", "x=http://h/%76%31", "base URL"},
		{"escaped slash after v1", "x=http://h/v1%2F", "base URL"},
		{"bad port", "x=http://h:port/v1", "base URL"},
		{"control char", "x=http://h/v1\n", "base URL"},
		{"space in host", "x=http://a b/v1", "base URL"},
		{"bad escape", "x=http://h/%zz/v1", "base URL"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			name, u, err := ParseProviderFlag(tc.in)
			var fe *FlagError
			if !errors.As(err, &fe) {
				t.Fatalf("ParseProviderFlag(%q) = %q, %q, %v; want *FlagError", tc.in, name, u, err)
			}
			if fe.Part != tc.part || fe.Flag != "NAME=BASE_URL" {
				t.Fatalf("error %q: part %q, want %q", err, fe.Part, tc.part)
			}
			if name != "" || u != "" {
				t.Fatalf("results %q, %q returned with an error", name, u)
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Fatalf("error repeats a password: %q", err)
			}
		})
	}
}

func TestParseProviderKeyEnvFlag(t *testing.T) {
	good := []struct{ in, name, env string }{
		{"openai=OPENAI_API_KEY", "openai", "OPENAI_API_KEY"},
		{"x=_", "x", "_"},
		{"x=a1", "x", "a1"},
		{"x=_9", "x", "_9"},
	}
	for _, tc := range good {
		name, env, err := ParseProviderKeyEnvFlag(tc.in)
		if err != nil || name != tc.name || env != tc.env {
			t.Errorf("ParseProviderKeyEnvFlag(%q) = %q, %q, %v", tc.in, name, env, err)
		}
	}
	bad := []struct{ name, in, part string }{
		{"empty", "", "syntax"},
		{"no equals", "openai", "syntax"},
		{"empty name", "=KEY", "name"},
		{"bad name", "Open=KEY", "name"},
		{"empty env", "x=", "env var"},
		{"digit first", "x=1KEY", "env var"},
		{"dash", "x=MY-KEY", "env var"},
		{"space", "x=MY KEY", "env var"},
		{"dollar", "x=$KEY", "env var"},
		{"second equals", "x=A=B", "env var"},
		{"non-ASCII", "x=KÉY", "env var"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseProviderKeyEnvFlag(tc.in)
			var fe *FlagError
			if !errors.As(err, &fe) || fe.Part != tc.part || fe.Flag != "NAME=ENV_VAR" {
				t.Fatalf("ParseProviderKeyEnvFlag(%q) error %v; want *FlagError on %q", tc.in, err, tc.part)
			}
		})
	}
}
