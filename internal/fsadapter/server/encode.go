package server

import (
	"strconv"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
)

// appendRead appends a read result encoded exactly as encoding/json encodes it with HTML
// escaping off (TestEncodeReadMatchesEncodingJSON), several times faster on text: up to 4 MiB
// of content is the one large value this adapter encodes, and the time it took showed in
// fs.read's throughput.
func appendRead(b []byte, r *fsops.ReadResult) []byte {
	b = append(b, `{"content":`...)
	b = ndjson.AppendString(b, r.Content)
	b = append(b, `,"bytesRead":`...)
	b = strconv.AppendInt(b, r.BytesRead, 10)
	b = append(b, `,"eof":`...)
	b = strconv.AppendBool(b, r.EOF)
	return append(b, '}')
}

// readSize is room enough for most read results of r without regrowing: a newline per 8 bytes.
func readSize(r *fsops.ReadResult) int { return len(r.Content) + len(r.Content)/8 + 64 }

// appendStat appends a stat result encoded exactly as encoding/json encodes it
// (TestEncodeStatMatchesEncodingJSON): the most frequent result, and reflection was most of
// the time its encoding took.
func appendStat(b []byte, r *fsops.StatResult) []byte {
	b = append(b, `{"type":`...)
	b = ndjson.AppendString(b, r.Type)
	b = append(b, `,"size":`...)
	b = strconv.AppendInt(b, r.Size, 10)
	if r.ModifiedAt != "" {
		b = append(b, `,"modifiedAt":`...)
		b = ndjson.AppendString(b, r.ModifiedAt)
	}
	return append(b, '}')
}
