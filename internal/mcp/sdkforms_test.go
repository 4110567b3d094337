package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkSDKResultForms measures the go-sdk alone (server and client in this process, on
// its in-memory transport, no airlock code) moving make bench-mcp's two large answers in the
// forms a handler can give them: structuredContent as raw JSON or as a Go value, with the
// text rendering the spec asks for beside it, and each half alone. The forms alternate call
// by call; each reports its p50. It is how callFS's choice was made: the form makes no
// measurable difference, the number of bytes does.
//
//	go test -run '^$' -bench SDKResultForms -benchtime 40x ./internal/mcp/
func BenchmarkSDKResultForms(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"entries":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"f%04d.txt","type":"file","size":2,"modifiedAt":"2026-12-04T02:35:59.123456789Z"}`, i)
	}
	sb.WriteString(`],"truncated":false}`)
	list := json.RawMessage(sb.String())
	type entry struct {
		Name       string `json:"name"`
		Type       string `json:"type"`
		Size       int64  `json:"size"`
		ModifiedAt string `json:"modifiedAt,omitempty"`
	}
	var typed struct {
		Entries   []entry `json:"entries"`
		Truncated bool    `json:"truncated"`
	}
	json.Unmarshal(list, &typed)
	line := strings.Repeat("0123456789abcdef", 4)[:63] + "\n"
	big := strings.Repeat(line, (1<<20)/64)
	bigRaw, _ := json.Marshal(readResult{Content: big, BytesRead: int64(len(big)), EOF: true})
	forms := map[string]func() *sdk.CallToolResult{
		"list/raw+text": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{StructuredContent: list, Content: []sdk.Content{&sdk.TextContent{Text: string(list)}}}
		},
		"list/typed+text": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{StructuredContent: typed, Content: []sdk.Content{&sdk.TextContent{Text: string(list)}}}
		},
		"list/raw-notext": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{StructuredContent: list, Content: []sdk.Content{}}
		},
		"list/text-only": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(list)}}}
		},
		"read1MiB/typed+text": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{StructuredContent: readResult{Content: big, BytesRead: int64(len(big)), EOF: true}, Content: []sdk.Content{&sdk.TextContent{Text: big}}}
		},
		"read1MiB/raw+text": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{StructuredContent: json.RawMessage(bigRaw), Content: []sdk.Content{&sdk.TextContent{Text: big}}}
		},
		"read1MiB/text-only": func() *sdk.CallToolResult {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: big}}}
		},
	}
	names := []string{"list/raw+text", "list/typed+text", "list/raw-notext", "list/text-only", "read1MiB/typed+text", "read1MiB/raw+text", "read1MiB/text-only"}
	srv := sdk.NewServer(&sdk.Implementation{Name: "s", Version: "1"}, nil)
	for _, name := range names {
		srv.AddTool(&sdk.Tool{Name: strings.NewReplacer("/", "_", "+", "_").Replace(name), InputSchema: map[string]any{"type": "object"}}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return forms[name](), nil
		})
	}
	st, ct := sdk.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "c", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	lat := map[string][]time.Duration{}
	for b.Loop() {
		for _, name := range names {
			start := time.Now()
			if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: strings.NewReplacer("/", "_", "+", "_").Replace(name)}); err != nil {
				b.Fatal(err)
			}
			lat[name] = append(lat[name], time.Since(start))
		}
	}
	for _, name := range names {
		l := lat[name]
		slices.Sort(l)
		b.ReportMetric(float64(l[len(l)/2].Microseconds()), name+"-p50-µs")
	}
}
