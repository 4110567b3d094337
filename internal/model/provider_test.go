package model_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/model"
)

const testKey = "sk-test-0123456789abcdefSECRET"

func TestProviderNeverPrintsKey(t *testing.T) {
	p := model.Provider{Name: "openai", BaseURL: "https://api.openai.com/v1", Key: testKey}
	var outs []string
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T %v", "%10.3v", "%-40s"} {
		outs = append(outs, fmt.Sprintf(f, p), fmt.Sprintf(f, &p))
	}
	outs = append(outs,
		fmt.Sprint(p), fmt.Sprintln(p), p.String(), p.GoString(),
		fmt.Sprintf("%v", []model.Provider{p}),
		fmt.Sprintf("%+v", map[string]model.Provider{"k": p}),
		fmt.Sprintf("%+v", struct{ P model.Provider }{p}),
		fmt.Sprintf("%#v", struct{ P *model.Provider }{&p}),
		fmt.Sprintf("%+v", model.NewClient(p)),
		fmt.Sprintf("%#v", model.NewClient(p)),
	)
	j, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	jp, _ := json.Marshal(struct{ P *model.Provider }{&p})
	outs = append(outs, string(j), string(jp))
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("provider", "p", p, "ptr", &p)
		log.Info("provider", slog.Any("p", p))
		outs = append(outs, buf.String())
	}
	for i, o := range outs {
		if strings.Contains(o, testKey) || strings.Contains(o, "SECRET") {
			t.Errorf("output %d reveals the key: %s", i, o)
		}
	}
	if !strings.Contains(string(j), `"key":"[redacted]"`) || !strings.Contains(outs[0], "[redacted]") {
		t.Errorf("a set key is not marked [redacted]: %s / %s", j, outs[0])
	}
	if got := fmt.Sprintf("%#v", p); got != `model.Provider{Name:"openai", BaseURL:"https://api.openai.com/v1", Key:"[redacted]"}` {
		t.Errorf("%%#v = %s", got)
	}

	none := model.Provider{Name: "ollama", BaseURL: "http://127.0.0.1:11434/v1"}
	if j, _ := json.Marshal(none); strings.Contains(string(j), "key") {
		t.Errorf("an empty key is shown: %s", j)
	}
}
