package tooladapter

import (
	"fmt"
	"strings"
	"testing"
)

// listData is an fs.list result of n files as airlock-fs encodes it.
func listData(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"entries":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"f%04d.txt","type":"file","size":2,"modifiedAt":"2026-12-04T02:35:59.123456789Z"}`, i)
	}
	sb.WriteString(`],"truncated":false}`)
	return []byte(sb.String())
}

// BenchmarkValidateResultList is the result check of a 1,000-entry fs.list, which airlockd
// runs on every list an adapter answers.
func BenchmarkValidateResultList(b *testing.B) {
	data := listData(1000)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if e := ValidateResult(OpList, data); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkDecodeListResultFrame is airlockd's decoding and check of a result frame carrying
// a 1,000-entry fs.list, as it reads every listing an adapter answers.
func BenchmarkDecodeListResultFrame(b *testing.B) {
	line, err := marshalFrame(&Frame{Kind: KindResult, Identity: testIdentity, RequestID: "r-1", IdempotencyKey: "tool-abc", Operation: OpList, OK: true, Data: listData(1000)})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, e := DecodeFrame(line); e != nil {
			b.Fatal(e)
		}
	}
}
