package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// clientFloor measures what one answer costs the go-sdk client itself: n tools/call calls
// answered, at once and always with the answer res, by a stand-in server on in-process
// pipes that spends nothing on them (the answer is encoded once, beforehand). Its p50 is the
// part of a server's p50 in make bench-mcp that no server can save: the client receiving and
// decoding what the server sent.
func clientFloor(b *testing.B, res *sdk.CallToolResult, n int) time.Duration {
	b.Helper()
	result, err := json.Marshal(res)
	if err != nil {
		b.Fatal(err)
	}
	cr, sw := io.Pipe() // the stand-in's answers, to the client
	sr, cw := io.Pipe() // the client's requests, to the stand-in
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sw.Close()
		br := bufio.NewReaderSize(sr, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					ProtocolVersion string `json:"protocolVersion"`
				} `json:"params"`
			}
			if json.Unmarshal(line, &req) != nil || req.ID == nil {
				continue // a notification
			}
			var answer json.RawMessage
			switch req.Method {
			case "initialize":
				answer, _ = json.Marshal(map[string]any{"protocolVersion": req.Params.ProtocolVersion,
					"capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "floor", "version": "1"}})
			case "tools/call":
				answer = result
			default:
				answer = json.RawMessage(`{}`)
			}
			out := append(append(append(append([]byte(`{"jsonrpc":"2.0","id":`), req.ID...), `,"result":`...), answer...), "}\n"...)
			if _, err := sw.Write(out); err != nil {
				return
			}
		}
	}()
	defer func() { cw.Close(); sr.Close(); <-done }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cl := sdk.NewClient(&sdk.Implementation{Name: "bench-mcp", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
	cs, err := cl.Connect(ctx, &sdk.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		b.Fatalf("connect to the stand-in: %v", err)
	}
	defer cs.Close()
	p := &sdk.CallToolParams{Name: "t", Arguments: map[string]any{}}
	for range 10 {
		if _, err := cs.CallTool(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := cs.CallTool(ctx, p); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	return stats(lat, sum(lat)).p50
}
