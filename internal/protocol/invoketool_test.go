package protocol

import (
	"reflect"
	"testing"
)

var invokeToolPayloads = []string{
	`{"toolCallId":"call-1","operation":"fs.read","arguments":{"path":"a.txt"}}`,
	` { "toolCallId" : "c\u0041" , "operation":"fs.stat", "arguments" : { } } `,
	`{"toolCallId":"c","operation":"fs.read"}`,
	`{"operation":"fs.read","arguments":null}`,
	`{"toolCallId":"bad\xffutf8","operation":"fs.read","arguments":{}}`,
	`{"toolCallId":1,"operation":"fs.read","arguments":{}}`,
	`{"toolCallId":null,"operation":"fs.read","arguments":{}}`,
	`{"toolCallId":"c","operation":"fs.read","arguments":{},"extra":1}`,
	`{"toolCallId":"c","ToolCallId":"d","operation":"fs.read","arguments":{}}`,
	`{"toolCallId":"c","toolCallId":"c","operation":"fs.read","arguments":{}}`,
	`{"toolCallId":"c","operation":["fs.read"],"arguments":{"a":1,"a":2}}`,
	`{"toolCallId":"c","operation":"fs.read","arguments":[1,2]}`,
	`{"toolCallId":"c","operation":"fs.read","arguments":{}`,
	`[]`,
	`{}`,
}

// checkInvokeToolPayload compares the one-pass decoder with DecodePayload, the reference.
func checkInvokeToolPayload(t *testing.T, payload []byte) {
	t.Helper()
	cmd := &Command{Payload: payload}
	got, gotErr := DecodeInvokeToolPayload(cmd)
	var want InvokeToolPayload
	wantErr := DecodePayload(&Command{Payload: payload}, &want)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: one pass %v, reference %v", payload, gotErr, wantErr)
	}
	if wantErr != nil {
		if !reflect.DeepEqual(gotErr, wantErr) {
			t.Fatalf("%q: one pass %#v, reference %#v", payload, gotErr, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("%q: one pass %+v, reference %+v", payload, *got, want)
	}
}

func TestDecodeInvokeToolPayload(t *testing.T) {
	for _, p := range invokeToolPayloads {
		checkInvokeToolPayload(t, []byte(p))
	}
}

func FuzzDecodeInvokeToolPayload(f *testing.F) {
	for _, p := range invokeToolPayloads {
		f.Add([]byte(p))
	}
	f.Fuzz(checkInvokeToolPayload)
}
