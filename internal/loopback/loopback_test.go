package loopback

import "testing"

func TestHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LocalHost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"::ffff:127.0.0.1": true, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
		"localhost.example.com": false, "": false, "[::1]": false,
	} {
		if got := Host(host); got != want {
			t.Errorf("Host(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:0": true, "localhost:1": true, ":8080": false,
		"0.0.0.0:80": false, "127.0.0.1": false, "192.168.1.2:80": false, "example.com:80": false,
	} {
		if got := Addr(addr); got != want {
			t.Errorf("Addr(%q) = %v, want %v", addr, got, want)
		}
	}
}
