// Package schemas holds the JSON Schemas (draft 2020-12) of airlock's wire formats, embedded so
// that tests, validators and tools can load them without a network or a checkout.
//
// Each file's $id is https://airlock.dev/schemas/<name>. Every $ref points into the file's own
// $defs, except that protocol-v2 takes the host tool-adapter descriptor, the operation names and
// results of invokeTool and the policy summary from tool-adapter.schema.json, by relative $refs
// that resolve against its $id: a validator that loads every file of FS needs no network.
// The schemas say exactly what the code accepts and emits; schemas_test.go proves it by running
// the same command lines, descriptors and frames through the Go parsers and the schemas, and by
// validating what a real daemon and a real adapter connection send.
package schemas

import (
	"embed"
	"io/fs"
)

// Names of the embedded schema files.
const (
	ProtocolV1  = "protocol-v1.schema.json"  // daemon protocol, major version 1
	ProtocolV2  = "protocol-v2.schema.json"  // daemon protocol, major version 2
	ToolAdapter = "tool-adapter.schema.json" // host tool-adapter protocol, wire version 1.0
)

// Names lists every embedded schema file.
var Names = []string{ProtocolV1, ProtocolV2, ToolAdapter}

// BaseURL is the prefix of every schema's $id: the $id of a file is BaseURL + its name.
const BaseURL = "https://airlock.dev/schemas/"

//go:embed *.schema.json
var files embed.FS

// FS returns the embedded schema files, at the root of the file system.
func FS() fs.FS { return files }

// ID returns the $id of the named schema file.
func ID(name string) string { return BaseURL + name }

// Protocol returns the name of the daemon-protocol schema for a protocol major version, or ""
// for a major this host does not speak.
func Protocol(major int) string {
	switch major {
	case 1:
		return ProtocolV1
	case 2:
		return ProtocolV2
	}
	return ""
}
