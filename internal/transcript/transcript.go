// Package transcript keeps a session's conversation as an owner-private JSONL file: one JSON
// object per line, a header first and then every message of every agent turn, in order. The
// daemon appends as a turn runs and, after a restart, reopens the same file (named by the
// [Identity] the catalog stores) to continue the conversation.
//
// # Format
//
// Line 1 is the header, then one line per message:
//
//	{"kind":"header","formatVersion":1,"conversationId":"20261202T160500Z-0123456789abcdef","createdAt":"2026-12-02T16:05:00Z"}
//	{"kind":"message","role":"user","content":"…","requestId":"r1","at":"2026-12-02T16:05:01Z"}
//	{"kind":"message","role":"assistant","toolCalls":[{"id":"c1","name":"fs.read","arguments":"{…}"}],"at":"…"}
//	{"kind":"message","role":"tool","content":"…","toolCallId":"c1","at":"…"}
//
// Every line ends with LF. Lines are decoded strictly (package ndjson): unknown or duplicated
// keys, a kind or role outside the closed sets, or tool fields on the wrong role make the whole
// file corrupt_transcript. The one tolerated damage is a last line without its LF, the trace
// of a write cut short by a crash: that entry was never acknowledged (Append returns only after
// fsync), so Open drops it and truncates the file back to the last complete line. A crash in
// the middle of a multi-entry Append can leave the batch's first whole lines behind: a batch
// is one write, not a transaction.
//
// # Security
//
// Guarantee: Create and Open only ever touch a regular file, not reached through a symbolic
// link in its last component, in a directory that is not a symbolic link, both owned by the
// effective uid and granting nothing to group or others; anything else is refused with
// insecure_state_path and never repaired. Not guaranteed: symbolic links in components above
// the transcript directory are followed, as for the rest of the state directory. Error
// messages name paths and line numbers, never entry contents.
//
// Concurrency: a [File] is safe for concurrent use; each Append is one write of whole lines.
// Nothing stops two processes from appending to one file: the daemon's state lock (package
// store) is what keeps a second airlockd away.
package transcript

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/protocol"
)

// FormatVersion is the version written in, and the only one accepted from, a header.
const FormatVersion = 1

// Limits. A transcript that would break one is refused by Append before anything is written,
// so Open never meets a file that Append produced and cannot read back.
const (
	// MaxLineBytes bounds one line (one entry), not counting its LF.
	MaxLineBytes = 4 << 20
	// MaxFileBytes bounds the whole file, header included. Open refuses a bigger file before
	// reading it.
	MaxFileBytes = 64 << 20
	// MaxEntries bounds the number of message entries (the header does not count).
	MaxEntries = 100000
)

// The limits in force; tests lower them (export_test.go).
var (
	maxLineBytes = MaxLineBytes
	maxFileBytes = int64(MaxFileBytes)
	maxEntries   = MaxEntries
)

// fsync makes a file's data (or a directory's names) durable. The fuzz target replaces it
// (export_test.go): durability is not what it tests, and fsync would cost it most of its speed.
var fsync = (*os.File).Sync

// Kinds of line.
const (
	KindHeader  = "header"
	KindMessage = "message"
)

// Roles of a message.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// ToolCall is one tool call an assistant message asks for. Arguments is the model's argument
// text, kept verbatim (usually a JSON object, but not checked here).
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Entry is one line of a transcript. Open and Append deal only in messages (Kind
// "message"): Role is one of system, user, assistant or tool; ToolCalls appear only on an
// assistant message and ToolCallID only on a tool message; RequestID is the requestId of the
// wake that produced the message; At is when it was recorded, written in UTC.
//
// FormatVersion and ConversationID belong to the header and must be empty in a message.
type Entry struct {
	Kind           string     `json:"kind"`
	FormatVersion  int        `json:"formatVersion,omitempty"`
	ConversationID string     `json:"conversationId,omitempty"`
	Role           string     `json:"role,omitempty"`
	Content        string     `json:"content,omitempty"`
	ToolCalls      []ToolCall `json:"toolCalls,omitempty"`
	ToolCallID     string     `json:"toolCallId,omitempty"`
	RequestID      string     `json:"requestId,omitempty"`
	At             time.Time  `json:"at"`
}

// header is line 1. It is not an Entry: it says createdAt, not at.
type header struct {
	Kind           string    `json:"kind"`
	FormatVersion  int       `json:"formatVersion"`
	ConversationID string    `json:"conversationId"`
	CreatedAt      time.Time `json:"createdAt"`
}

// Identity names a conversation: its id (the header's conversationId) and the absolute path of
// its transcript. It is what the catalog stores.
type Identity struct {
	ID   string `json:"id"`
	File string `json:"file"`
}

// File is an open transcript, safe for concurrent use. Close it when done.
type File struct {
	id Identity

	mu sync.Mutex // guards the fields below and serializes writes to f
	f  *os.File   // nil once closed
	// size is the length of the file: every byte written by Create and acknowledged Appends.
	size int64
	// entries is the number of message lines.
	entries int
	// broken is set when a write could not be undone or an fsync failed: what the file holds
	// is then unknown, and every later Append returns this error instead of guessing.
	broken error
}

// Identity returns the conversation's id and the transcript's absolute path.
func (f *File) Identity() Identity { return f.id }

// Size returns the length of the transcript in bytes.
func (f *File) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Len returns the number of message entries in the transcript.
func (f *File) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.entries
}

// Close closes the file. It is idempotent and safe to call concurrently with Append; an Append
// after Close fails with an error satisfying errors.Is(err, os.ErrClosed).
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	return err
}

// Append records entries, in order, as one write of whole lines followed by an fsync; it
// returns only once they are durable. An entry with an empty Kind is a message; a zero At
// becomes the current time. The caller's entries are not modified.
//
// Append refuses the whole batch, before writing anything, when an entry is not a valid
// message (invalid_transcript_entry), when an entry would encode to more than MaxLineBytes
// (transcript_entry_too_large), or when the file would pass MaxFileBytes or MaxEntries
// (transcript_full). If the write fails the file is truncated back to its previous length; if
// that or the fsync fails, this and every later Append fail and the caller should reopen.
func (f *File) Append(entries ...Entry) error {
	if len(entries) == 0 {
		return nil
	}
	now := time.Now()
	var buf []byte
	for i := range entries {
		e := entries[i]
		if e.Kind == "" {
			e.Kind = KindMessage
		}
		if e.At.IsZero() {
			e.At = now
		}
		e.At = e.At.UTC()
		if reason := checkEntry(&e); reason != "" {
			return protocol.Errorf(CodeInvalidEntry, "transcript %s: entry %d of %d: %s", f.id.File, i+1, len(entries), reason)
		}
		line, err := encodeLine(&e)
		if err != nil {
			return protocol.Wrap(protocol.Errorf(CodeInvalidEntry, "transcript %s: entry %d of %d cannot be encoded", f.id.File, i+1, len(entries)), err)
		}
		if len(line)-1 > maxLineBytes {
			return protocol.Errorf(CodeTranscriptEntryTooLarge, "transcript %s: entry %d of %d encodes to %d bytes; the limit is %d",
				f.id.File, i+1, len(entries), len(line)-1, maxLineBytes)
		}
		buf = append(buf, line...)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.f == nil:
		return fmt.Errorf("append to transcript %s: %w", f.id.File, os.ErrClosed)
	case f.broken != nil:
		return fmt.Errorf("append to transcript %s: an earlier write failed: %w", f.id.File, f.broken)
	case f.size+int64(len(buf)) > maxFileBytes:
		return protocol.Errorf(CodeTranscriptFull, "transcript %s holds %d bytes; %d more would pass the limit of %d",
			f.id.File, f.size, len(buf), maxFileBytes)
	case f.entries+len(entries) > maxEntries:
		return protocol.Errorf(CodeTranscriptFull, "transcript %s holds %d entries; %d more would pass the limit of %d",
			f.id.File, f.entries, len(entries), maxEntries)
	}
	if _, err := f.f.Write(buf); err != nil {
		// Part of the batch may be on disk. Cut it off, so that the next Append does not
		// start in the middle of a line and leave a corrupt line inside the file.
		if terr := f.f.Truncate(f.size); terr != nil {
			f.broken = errors.Join(err, terr)
		}
		return fmt.Errorf("append to transcript %s: %w", f.id.File, err)
	}
	if err := fsync(f.f); err != nil {
		// After a failed fsync the kernel may have dropped the dirty pages: whether the
		// lines are on disk is unknown, so nothing more is written to this file.
		f.broken = err
		return fmt.Errorf("append to transcript %s: fsync: %w", f.id.File, err)
	}
	f.size += int64(len(buf))
	f.entries += len(entries)
	return nil
}
