// Package schemas holds the JSON Schemas (draft 2020-12) of airlock's wire formats, embedded so
// that tests, validators and tools can load them without a network or a checkout.
//
// Each file is self-contained: its $id is https://airlock.dev/schemas/<name> and every $ref in
// it points into its own $defs, so a validator needs only the file itself. The schemas say
// exactly what the code accepts and emits; schemas_test.go proves it by running the same
// command lines through the parser and the schema, and by validating what a real daemon sends.
package schemas

import (
	"embed"
	"io/fs"
)

// Names of the embedded schema files.
const (
	ProtocolV1 = "protocol-v1.schema.json" // daemon protocol, major version 1
	ProtocolV2 = "protocol-v2.schema.json" // daemon protocol, major version 2
)

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
