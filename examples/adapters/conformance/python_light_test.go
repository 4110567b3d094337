package conformance_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/capadapter"
	"github.com/airlockhq/airlock/internal/validate"
)

// fakeBulb is examples/adapters/python-light/fake_bulb.py, running on 127.0.0.1.
type fakeBulb struct {
	base string // http://127.0.0.1:PORT
	port string
}

// startFakeBulb starts fake_bulb.py on an ephemeral port and stops it (by closing its stdin)
// when the test ends.
func startFakeBulb(t *testing.T, python string) fakeBulb {
	t.Helper()
	cmd := exec.Command(python, adapterFile(t, "python-light", "fake_bulb.py"), "--port", "0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("fake bulb: %v", err)
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("the fake bulb did not stop when its stdin closed")
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout) // until it exits
		exited <- cmd.Wait()
	}()
	var line string
	select {
	case line = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("the fake bulb did not start")
	}
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if n, err := strconv.Atoi(port); !ok || err != nil || n <= 0 {
		t.Fatalf("fake bulb said %q", line)
	}
	return fakeBulb{base: "http://127.0.0.1:" + port, port: port}
}

// requests returns what the bulb has served so far ("GET /state", "POST /color #123456").
func (b fakeBulb) requests(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/log", nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen []string
	if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil {
		t.Fatal(err)
	}
	return seen
}

func (b fakeBulb) posts(t *testing.T) []string {
	var posts []string
	for _, r := range b.requests(t) {
		if strings.HasPrefix(r, "POST ") {
			posts = append(posts, r)
		}
	}
	return posts
}

type lightState struct {
	On    bool   `json:"on"`
	Color string `json:"color"`
}

func TestPythonLight(t *testing.T) {
	python := python3(t)
	bulb := startFakeBulb(t, python)
	// The bulb's address is in the adapter's config file, never in its arguments.
	config := writeJSON(t, t.TempDir(), "light.json", map[string]string{"bulb": bulb.base})
	light := adapterFile(t, "python-light", "light.py")

	conform(t, validate.Config{
		Command:    python,
		Args:       []string{light, config},
		Action:     "set_color",
		ActionArgs: json.RawMessage(`{"color":"#12AB56"}`),
	})
	// The harness's known-valid set_color reached the bulb; its invalid_args probes did not.
	posts := bulb.posts(t)
	if len(posts) == 0 {
		t.Fatal("the harness's set_color never reached the bulb")
	}
	for _, p := range posts {
		if p != "POST /color #12ab56" {
			t.Errorf("the bulb received %q; want only the harness's set_color #12ab56", p)
		}
	}

	// Through the runtime's own client: the state the bulb holds, and a second colour.
	c := startAdapter(t, python, light, config)
	var st lightState
	obs := observe(t, c, "living_room_light", &st)
	if st != (lightState{On: true, Color: "#12ab56"}) {
		t.Errorf("observe = %s, want the colour the harness set", obs)
	}
	res := invoke(t, c, "living_room_light", "set_color", `{"color":"#FF8000"}`, &st)
	if st != (lightState{On: true, Color: "#ff8000"}) {
		t.Errorf("set_color #FF8000 = %s", res)
	}
	if got := bulb.posts(t); got[len(got)-1] != "POST /color #ff8000" {
		t.Errorf("the bulb's last request is %q, want POST /color #ff8000", got[len(got)-1])
	}
	// A colour the descriptor cannot express as a rule is refused by the adapter itself.
	if _, err := c.Invoke(callCtx(t), "living_room_light", "set_color", json.RawMessage(`{"color":"red"}`)); capadapter.CodeOf(err) != capadapter.CodeInvalidArgs {
		t.Errorf("set_color red: %v, want invalid_args", err)
	}
	// Where the bulb lives never leaves the adapter.
	assertHidden(t, []string{bulb.base, "127.0.0.1", bulb.port, config}, descriptorsJSON(t, c), obs, res)
}

// TestPythonLightBulbDown: with the bulb unreachable the adapter still starts (it connects
// lazily) and answers observe with unavailable, in time.
func TestPythonLightBulbDown(t *testing.T) {
	python := python3(t)
	// Port 1 on loopback: nothing listens there.
	config := writeJSON(t, t.TempDir(), "light.json", map[string]string{"bulb": "http://127.0.0.1:1"})
	c := startAdapter(t, python, adapterFile(t, "python-light", "light.py"), config)
	start := time.Now()
	_, err := c.Observe(callCtx(t), "living_room_light")
	if capadapter.CodeOf(err) != capadapter.CodeUnavailable {
		t.Fatalf("observe with the bulb down: %v, want unavailable", err)
	}
	if c.Failure() != nil {
		t.Errorf("the adapter was killed: %v", c.Failure())
	}
	t.Logf("unavailable after %v", time.Since(start).Round(time.Millisecond))
}
