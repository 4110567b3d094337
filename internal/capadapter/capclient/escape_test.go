package capclient

import (
	"context"
	"fmt"
	"testing"

	"github.com/airlockhq/airlock/internal/capadapter"
)

// End to end: an adapter that escapes its way past a byte screen is refused at the handshake,
// or has its result withheld, exactly as if it had written the text plainly.
func TestClientRefusesEscapedUnsafeText(t *testing.T) {
	noLeaks(t)
	for _, mode := range []string{"escaped-id", "escaped-title"} {
		t.Run(mode, func(t *testing.T) {
			reg := helperRegistration(t, "h", mode)
			c, err := Spawn(reg.Command, reg.Args, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
			defer cancel()
			_, err = c.Handshake(ctx)
			wantCode(t, err, capadapter.CodeInvalidDescriptor)
			waitDone(t, c)
			c.Close(context.Background())
		})
	}
	for _, mode := range []string{"escaped-url-result", "escaped-secret-result"} {
		t.Run(mode, func(t *testing.T) {
			c := startHelper(t, mode, ClientOptions{})
			_, err := c.Observe(context.Background(), "test_light")
			wantCode(t, err, capadapter.CodeResultWithheld)
			if c.Failure() != nil {
				t.Fatalf("the child failed: %v", c.Failure())
			}
		})
	}
}

// escapedResponse is the raw response frame of the escaped-* helper modes, or "".
func escapedResponse(mode, method, id string) string {
	frame := func(result string) string {
		return fmt.Sprintf(`{"protocolVersion":1,"id":%q,"result":%s}`+"\n", id, result)
	}
	switch {
	case mode == "escaped-id" && (method == "list" || method == "describe"):
		d := `{"capabilityId":"my.url\u003a1","title":"X","version":"1","observe":true,"actions":[]}`
		if method == "list" {
			d = "[" + d + "]"
		}
		return frame(d)
	case mode == "escaped-title" && (method == "list" || method == "describe"):
		d := `{"capabilityId":"x","title":"Token\u003a x","version":"1","observe":true,"actions":[]}`
		if method == "list" {
			d = "[" + d + "]"
		}
		return frame(d)
	case mode == "escaped-url-result" && method == "observe":
		return frame(`{"note":"https:\/\/evil.example/x"}`)
	case mode == "escaped-secret-result" && method == "observe":
		return frame(`{"note":"password\u003d hunter2"}`)
	}
	return ""
}
