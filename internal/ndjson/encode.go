package ndjson

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v as one NDJSON line, LF included. HTML characters are not escaped, so the
// line holds exactly the text a peer sent or a human would write.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
