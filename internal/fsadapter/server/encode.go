package server

import (
	"strconv"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/ndjson"
)

// appendRead appends a read result encoded exactly as encoding/json encodes it with HTML
// escaping off (TestEncodeReadMatchesEncodingJSON), several times faster on text: up to 4 MiB
// of content is the one large value this adapter encodes. It pays its way on a whole-file read
// (make bench-fs read4MiB: about 30 % more MB/s than encoding/json); every other result,
// fs.stat's included, goes through encoding/json.
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
