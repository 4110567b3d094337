package bus

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

const (
	hostA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	hostB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func userKey(t testing.TB) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// validFabric is a well-formed cluster file as JSON, for the cases to break.
func validFabric(t testing.TB) map[string]any {
	t.Helper()
	return map[string]any{
		"version": 1, "node": "n1", "mode": "cluster", "listen": "10.0.0.1:4222",
		"tls":     map[string]any{"ca": "ca.pem", "cert": "node.pem", "key": "node-key.pem"},
		"cluster": map[string]any{"name": "airlock", "listen": "10.0.0.1:6222", "routes": []any{"10.0.0.2:6222", "10.0.0.3:6222"}},
		"host":    map[string]any{"id": hostA, "seed": "host.nk"},
		"users": []any{
			map[string]any{"host": hostA, "nkey": userKey(t), "rooms": []any{"living"}, "owns": []any{"living"}},
			map[string]any{"host": hostB, "nkey": userKey(t), "rooms": []any{"living"}},
		},
	}
}

func encode(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseFabric(t *testing.T) {
	f, err := ParseFabric(encode(t, validFabric(t)))
	if err != nil {
		t.Fatal(err)
	}
	if f.ClusterSize() != 3 || f.Replicas() != 3 {
		t.Fatalf("size %d, replicas %d", f.ClusterSize(), f.Replicas())
	}

	leaf := validFabric(t)
	delete(leaf, "cluster")
	delete(leaf, "users")
	leaf["mode"] = "leaf"
	leaf["leaf"] = map[string]any{"urls": []any{"hub.example:7422"}, "domain": "airlock"}
	if f, err := ParseFabric(encode(t, leaf)); err != nil || f.Replicas() != 1 {
		t.Fatalf("leaf: %v", err)
	}

	cases := []struct {
		name  string
		edit  func(m map[string]any)
		raw   string
		code  string
		field string
	}{
		{name: "not json", raw: `{"version":1,`, code: CodeFabricMalformed},
		{name: "unknown member", edit: func(m map[string]any) { m["gateway"] = true }, code: CodeFabricMalformed},
		{name: "case variant", raw: `{"Version":1}`, code: CodeFabricMalformed},
		{name: "duplicate key", raw: `{"version":1,"version":1}`, code: CodeFabricMalformed},
		{name: "too large", raw: `"` + strings.Repeat("x", MaxFabricBytes) + `"`, code: CodeFabricMalformed},
		{name: "version", edit: func(m map[string]any) { m["version"] = 2 }, code: CodeFabricVersion},
		{name: "node name", edit: func(m map[string]any) { m["node"] = "n 1" }, code: CodeFabricInvalid, field: "node"},
		{name: "listen host name", edit: func(m map[string]any) { m["listen"] = "box:4222" }, code: CodeFabricInvalid, field: "listen"},
		{name: "listen port 0", edit: func(m map[string]any) { m["listen"] = "10.0.0.1:0" }, code: CodeFabricInvalid, field: "listen"},
		{name: "no key file", edit: func(m map[string]any) { m["tls"].(map[string]any)["key"] = "" }, code: CodeFabricInvalid, field: "tls.key"},
		{name: "host id", edit: func(m map[string]any) { m["host"].(map[string]any)["id"] = "ABC" }, code: CodeFabricInvalid, field: "host.id"},
		{name: "mode", edit: func(m map[string]any) { m["mode"] = "gateway" }, code: CodeFabricInvalid, field: "mode"},
		{name: "cluster missing", edit: func(m map[string]any) { delete(m, "cluster") }, code: CodeFabricInvalid, field: "cluster"},
		{name: "leaf in cluster mode", edit: func(m map[string]any) { m["leaf"] = map[string]any{"urls": []any{"h:1"}} }, code: CodeFabricInvalid, field: "leaf"},
		{name: "route repeats own", edit: func(m map[string]any) {
			m["cluster"].(map[string]any)["routes"] = []any{"10.0.0.1:6222"}
		}, code: CodeFabricInvalid, field: "cluster.routes[0]"},
		{name: "route not ip", edit: func(m map[string]any) {
			m["cluster"].(map[string]any)["routes"] = []any{"10.0.0.2:6222", "peer"}
		}, code: CodeFabricInvalid, field: "cluster.routes[1]"},
		{name: "no users", edit: func(m map[string]any) { m["users"] = []any{} }, code: CodeFabricInvalid, field: "users"},
		{name: "bad nkey", edit: func(m map[string]any) {
			m["users"].([]any)[1].(map[string]any)["nkey"] = "SUAM" // a seed's prefix, not a public key
		}, code: CodeFabricInvalid, field: "users[1].nkey"},
		{name: "repeated host", edit: func(m map[string]any) {
			m["users"].([]any)[1].(map[string]any)["host"] = hostA
		}, code: CodeFabricInvalid, field: "users[1]"},
		{name: "bad room", edit: func(m map[string]any) {
			m["users"].([]any)[1].(map[string]any)["rooms"] = []any{"living.>"}
		}, code: CodeFabricInvalid, field: "users[1].rooms[0]"},
		{name: "owns a room it is not in", edit: func(m map[string]any) {
			m["users"].([]any)[1].(map[string]any)["owns"] = []any{"kitchen"}
		}, code: CodeFabricInvalid, field: "users[1].owns[0]"},
		{name: "leaf without urls", edit: func(m map[string]any) {
			delete(m, "cluster")
			delete(m, "users")
			m["mode"] = "leaf"
			m["leaf"] = map[string]any{"urls": []any{}}
		}, code: CodeFabricInvalid, field: "leaf.urls"},
		{name: "leaf with users", edit: func(m map[string]any) {
			delete(m, "cluster")
			m["mode"] = "leaf"
			m["leaf"] = map[string]any{"urls": []any{"hub:7422"}, "domain": "airlock"}
		}, code: CodeFabricInvalid, field: "users"},
		{name: "leaf domain", edit: func(m map[string]any) {
			delete(m, "cluster")
			delete(m, "users")
			m["mode"] = "leaf"
			m["leaf"] = map[string]any{"urls": []any{"hub:7422"}, "domain": "a.b"}
		}, code: CodeFabricInvalid, field: "leaf.domain"},
		{name: "leaf replicas", edit: func(m map[string]any) {
			delete(m, "cluster")
			delete(m, "users")
			m["mode"] = "leaf"
			m["leaf"] = map[string]any{"urls": []any{"hub:7422"}, "domain": "airlock", "replicas": 9}
		}, code: CodeFabricInvalid, field: "leaf.replicas"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := []byte(c.raw)
			if c.edit != nil {
				m := validFabric(t)
				c.edit(m)
				data = encode(t, m)
			}
			_, err := ParseFabric(data)
			var fe *FabricError
			if !errors.As(err, &fe) || fe.Code != c.code || fe.Field != c.field {
				t.Fatalf("got %v, want %s at %q", err, c.code, c.field)
			}
			if !errors.Is(err, ErrConfig) || !errors.Is(err, &FabricError{Code: c.code}) {
				t.Fatalf("%v does not match its class", err)
			}
		})
	}
}

// FuzzParseFabric holds ParseFabric to its properties: it never panics, what it accepts
// re-encodes to a file it accepts again with the same meaning, and what it accepts is within
// every bound the servers are configured from.
func FuzzParseFabric(f *testing.F) {
	f.Add(encode(f, validFabric(f)))
	f.Add([]byte(`{"version":1,"node":"n1","mode":"leaf","tls":{"ca":"a","cert":"b","key":"c"},"host":{"id":"` + hostA + `","seed":"s"},"leaf":{"urls":["hub:7422"],"domain":"airlock","replicas":3}}`))
	f.Add([]byte(`{"version":1,"version":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fb, err := ParseFabric(data)
		if err != nil {
			var fe *FabricError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := ParseFabric(encode(t, fb))
		if err != nil {
			t.Fatalf("re-encoded file refused: %v", err)
		}
		if string(encode(t, again)) != string(encode(t, fb)) {
			t.Fatal("re-encoding changed the file")
		}
		if fb.Replicas() < 1 || fb.Replicas() > 5 || fb.ClusterSize() > maxRoutes+1 || len(fb.Users) > maxUsers {
			t.Fatalf("out of bounds: replicas %d, size %d", fb.Replicas(), fb.ClusterSize())
		}
		for _, u := range fb.Users {
			for _, r := range u.Rooms {
				if strings.ContainsAny(r, ".*> \t") {
					t.Fatalf("room %q is not one subject token", r)
				}
			}
		}
	})
}

func TestLoadFabricChecksItsFiles(t *testing.T) {
	dir := t.TempDir()
	spec := FabricSpec{Cluster: "c", Nodes: []NodeSpec{{Name: "n1", IP: "127.0.0.2", Host: hostA}, {Name: "n2", IP: "127.0.0.3", Host: hostB}},
		Rooms: map[string][]string{"living": {"n1", "n2"}}}
	if err := InitFabric(filepath.Join(dir, "f"), spec); err != nil {
		t.Fatal(err)
	}
	// Init refuses a directory that is not empty.
	if err := InitFabric(filepath.Join(dir, "f"), spec); !errors.Is(err, &FabricError{Code: CodeFabricFile}) {
		t.Fatalf("init over a fabric: %v", err)
	}
	n1 := filepath.Join(dir, "f", "n1")
	for name, mode := range map[string]os.FileMode{"node-key.pem": 0o600, "host.nk": 0o600, "fabric.json": 0o600, "node.pem": 0o644} {
		fi, err := os.Stat(filepath.Join(n1, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v %v", name, fi.Mode(), err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "f")); fi.Mode().Perm() != 0o700 {
		t.Fatalf("fabric directory mode %v", fi.Mode())
	}
	// An empty directory that was there already is made 0700: the CA key goes in it.
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o700); err != nil || os.Chmod(open, 0o755) != nil {
		t.Fatal(err)
	}
	if err := InitFabric(open, spec); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(open); fi.Mode().Perm() != 0o700 {
		t.Fatalf("an existing empty fabric directory's mode %v", fi.Mode())
	}
	fb, err := LoadFabric(filepath.Join(n1, "fabric.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fb.HostID() != hostA || fb.Replicas() != 2 || len(fb.File.Users) != 2 {
		t.Fatalf("loaded: %+v", fb.File)
	}
	u := fb.File.Users[0]
	if u.Host != hostA || len(u.Rooms) != 1 || len(u.Owns) != 1 || len(fb.File.Users[1].Owns) != 0 {
		t.Fatalf("users: %+v", fb.File.Users)
	}
	if err := InitFabric(filepath.Join(dir, "g"), FabricSpec{Cluster: "c", Nodes: []NodeSpec{{Name: "n1", IP: "box", Host: hostA}}}); !errors.Is(err, &FabricError{Code: CodeFabricInvalid}) {
		t.Fatalf("init with a host name: %v", err)
	}
	for _, ip := range []string{"0.0.0.0", "::", "224.0.0.1"} {
		if err := InitFabric(filepath.Join(dir, "g"), FabricSpec{Cluster: "c", Nodes: []NodeSpec{{Name: "n1", IP: ip, Host: hostA}}}); !errors.Is(err, &FabricError{Code: CodeFabricInvalid}) {
			t.Fatalf("init with node address %s: %v", ip, err)
		}
	}

	// Another node's certificate and key (valid, of the fabric's CA): its peers would refuse
	// this node's routes, so the node does not start.
	for _, name := range []string{"node.pem", "node-key.pem"} {
		data, err := os.ReadFile(filepath.Join(dir, "f", "n2", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "n1-"+name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n1File, err := ParseFabric(mustRead(t, filepath.Join(n1, "fabric.json")))
	if err != nil {
		t.Fatal(err)
	}
	n1File.TLS.Cert, n1File.TLS.Key = filepath.Join(dir, "n1-node.pem"), filepath.Join(dir, "n1-node-key.pem")
	if _, err := openFabric(n1File, n1); !errors.Is(err, &FabricError{Code: CodeFabricFile}) || !strings.Contains(err.Error(), `does not name node "n1"`) {
		t.Fatalf("n2's certificate for n1: %v", err)
	}
	n1File.Node = "n2" // named right, on n1's route address
	if _, err := openFabric(n1File, n1); !errors.Is(err, &FabricError{Code: CodeFabricFile}) || !strings.Contains(err.Error(), "127.0.0.2") {
		t.Fatalf("n2's certificate on n1's address: %v", err)
	}

	// A certificate of another fabric's CA, and n1's own certificate out of its validity: its
	// peers would refuse its routes (unknown authority, expired), so the node does not start.
	if err := InitFabric(filepath.Join(dir, "other"), spec); err != nil {
		t.Fatal(err)
	}
	n1File.Node = "n1"
	n1File.TLS.Cert, n1File.TLS.Key = filepath.Join(dir, "other", "n1", "node.pem"), filepath.Join(dir, "other", "n1", "node-key.pem")
	if _, err := openFabric(n1File, n1); !errors.Is(err, &FabricError{Code: CodeFabricFile}) || !strings.Contains(err.Error(), "not one of the fabric's CA") {
		t.Fatalf("another CA's certificate: %v", err)
	}
	ca, caKey := readCA(t, filepath.Join(dir, "f"))
	for _, when := range []time.Time{time.Now().Add(-3 * nodeValidity), time.Now().Add(24 * time.Hour)} {
		nd := filepath.Join(dir, "dated", when.Format("20060102"))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeNodeCert(nd, NodeSpec{Name: "n1", IP: "127.0.0.2"}, ca, caKey, when); err != nil {
			t.Fatal(err)
		}
		n1File.TLS.Cert, n1File.TLS.Key = filepath.Join(nd, "node.pem"), filepath.Join(nd, "node-key.pem")
		want := "expired"
		if when.After(time.Now()) {
			want = "valid only from"
		}
		if _, err := openFabric(n1File, n1); !errors.Is(err, &FabricError{Code: CodeFabricFile}) || !strings.Contains(err.Error(), want) {
			t.Fatalf("a certificate made at %v: %v", when, err)
		}
	}

	// A readable key, a missing file, a seed of the wrong kind: each refused as fabric_file.
	if err := os.Chmod(filepath.Join(n1, "node-key.pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFabric(filepath.Join(n1, "fabric.json")); !errors.Is(err, &FabricError{Code: CodeFabricFile}) || !strings.Contains(err.Error(), "tls.key") {
		t.Fatalf("readable key: %v", err)
	}
	_ = os.Chmod(filepath.Join(n1, "node-key.pem"), 0o600)
	if _, err := LoadFabric(filepath.Join(dir, "missing.json")); !errors.Is(err, &FabricError{Code: CodeFabricFile}) {
		t.Fatalf("missing file: %v", err)
	}
	acct, _ := nkeys.CreateAccount()
	seed, _ := acct.Seed()
	if err := os.WriteFile(filepath.Join(n1, "host.nk"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFabric(filepath.Join(n1, "fabric.json"))
	if !errors.Is(err, &FabricError{Code: CodeFabricFile}) || strings.Contains(err.Error(), string(seed)) {
		t.Fatalf("account seed: %v", err)
	}
	// The other node's seed: no user of this node's host has its public key.
	other, _ := os.ReadFile(filepath.Join(dir, "f", "n2", "host.nk"))
	if err := os.WriteFile(filepath.Join(n1, "host.nk"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFabric(filepath.Join(n1, "fabric.json")); !errors.Is(err, &FabricError{Code: CodeFabricInvalid}) {
		t.Fatalf("another host's seed: %v", err)
	}
}

// readCA reads the CA certificate and key that InitFabric wrote in dir.
func readCA(t testing.TB, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	block, _ := pem.Decode(mustRead(t, filepath.Join(dir, "ca.pem")))
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	block, _ = pem.Decode(mustRead(t, filepath.Join(dir, "ca-key.pem")))
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return ca, key.(*ecdsa.PrivateKey)
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
