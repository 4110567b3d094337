package transcript

import (
	"errors"

	"github.com/airlockhq/airlock/internal/ndjson"
	"github.com/airlockhq/airlock/internal/protocol"
)

// Error codes the transcript adds to those of package protocol. None is retryable: the same
// call fails the same way until an operator or the caller changes something.
const (
	// CodeConversationIdentityMissing: the transcript file a conversation names does not exist
	// (or, from OpenIdentity, holds a different conversation).
	CodeConversationIdentityMissing = "conversation_identity_missing"
	// CodeCorruptTranscript: the file exists but is not a transcript this airlockd can read.
	CodeCorruptTranscript = "corrupt_transcript"
	// CodeTranscriptEntryTooLarge: one entry would encode to a line over MaxLineBytes.
	CodeTranscriptEntryTooLarge = "transcript_entry_too_large"
	// CodeTranscriptFull: the transcript would grow past MaxFileBytes or MaxEntries.
	CodeTranscriptFull = "transcript_full"
	// CodeInvalidEntry: Append was given an entry that Open would refuse to read back (an
	// unknown kind or role, tool fields on the wrong role, an unencodable time). It is a bug
	// in the caller, refused before anything is written.
	CodeInvalidEntry = "invalid_transcript_entry"
)

func insecure(format string, args ...any) *protocol.Error {
	return protocol.Errorf(protocol.CodeInsecureStatePath, format, args...)
}

func corrupt(format string, args ...any) *protocol.Error {
	return protocol.Errorf(CodeCorruptTranscript, format, args...)
}

func missing(format string, args ...any) *protocol.Error {
	return protocol.Errorf(CodeConversationIdentityMissing, format, args...)
}

// decodeCause turns a strict-decoding failure into a cause that is safe to log. It keeps the
// reason, and the member path only where the path names a field of ours: for an unknown,
// duplicated or case-variant key the path is a key taken from the file. The Detail is always
// dropped, because for a malformed time it quotes the stored value.
func decodeCause(err error) error {
	var de *ndjson.DecodeError
	if !errors.As(err, &de) {
		return errors.New("json: malformed value")
	}
	switch de.Reason {
	case ndjson.ReasonUnknownField, ndjson.ReasonDuplicateKey, ndjson.ReasonCaseVariant:
		return &ndjson.DecodeError{Reason: de.Reason}
	}
	return &ndjson.DecodeError{Reason: de.Reason, Path: de.Path}
}
