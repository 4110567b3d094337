package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/bus"
)

func TestFabricInit(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "fabric")
	ha, hb := strings.Repeat("a", 64), strings.Repeat("b", 64)
	r := cli(t, "/nonexistent.sock", "", "fabric", "init", "--dir", dir, "--cluster", "home",
		"--node", "a=10.0.0.1", "--node", "b=10.0.0.2", "--host", "a="+ha, "--host", "b="+hb,
		"--room", "living=a,b", "--json").wantCode(t, exitOK)
	var env jsonEnvelope
	if err := json.Unmarshal([]byte(r.stdout), &env); err != nil || !env.OK {
		t.Fatalf("%s %v", r.stdout, err)
	}
	var res fabricInitResult
	if err := json.Unmarshal(env.Data, &res); err != nil || len(res.Nodes) != 2 || res.Nodes[1].Dir != filepath.Join(dir, "b") {
		t.Fatalf("%+v %v", res, err)
	}
	fb, err := bus.LoadFabric(filepath.Join(dir, "b", "fabric.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := fb.File
	if f.Node != "b" || f.Cluster.Name != "home" || f.Listen != "10.0.0.2:4222" || len(f.Cluster.Routes) != 1 ||
		f.Cluster.Routes[0] != "10.0.0.1:6222" || f.Users[0].Owns[0] != "living" || len(f.Users[1].Owns) != 0 {
		t.Fatalf("b's fabric: %+v %+v", f, f.Cluster)
	}
	seed, _ := os.ReadFile(filepath.Join(dir, "b", "host.nk"))
	if strings.Contains(r.stdout, strings.TrimSpace(string(seed))) {
		t.Fatal("the output holds a seed")
	}
	// Again into the same directory: refused with the fabric's code, nothing overwritten.
	r = cli(t, "/nonexistent.sock", "", "fabric", "init", "--dir", dir, "--node", "a=10.0.0.1", "--host", "a="+ha).wantCode(t, exitFailure)
	if !strings.Contains(r.stderr, "airlock: fabric_file:") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "b", "host.nk"))
	if string(again) != string(seed) {
		t.Fatal("a second init changed the seed")
	}
}

func TestFabricInitUsage(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("a", 64)
	for _, args := range [][]string{
		{"fabric", "init", "--node", "a=10.0.0.1", "--host", "a=" + h},
		{"fabric", "init", "--dir", "x"},
		{"fabric", "init", "--dir", "x", "--node", "a=10.0.0.1"},
		{"fabric", "init", "--dir", "x", "--node", "a", "--host", "a=" + h},
		{"fabric", "init", "--dir", "x", "--node", "a=10.0.0.1", "--host", "a=" + h, "--host", "b=" + h},
		{"fabric", "init", "--dir", "x", "--node", "a=10.0.0.1", "--host", "a=" + h, "--room", "living"},
		{"fabric", "init", "--dir", "x", "--node", "a=10.0.0.1", "--host", "a=" + h, "--room", "living=zz"},
		{"fabric", "init", "--dir", "x", "--node", "a=box", "--host", "a=" + h},
		{"fabric", "init", "--dir", "x", "--node", "a=10.0.0.1", "--host", "a=XYZ"},
	} {
		for i := range args {
			if args[i] == "x" {
				args[i] = filepath.Join(t.TempDir(), "fabric")
			}
		}
		r := cli(t, "/nonexistent.sock", "", args...).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, "airlock: usage:") {
			t.Errorf("%v: %s", args, r.stderr)
		}
	}
}
