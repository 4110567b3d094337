package fsops

// Payloads and results of the fs.* operations, with the wire's member names (facts §5.3). The
// wire has no defaults; the defaults below are airlock-fs's own and are documented in
// docs/airlock-fs.md. Optional members are pointers so that absent and zero differ.

import "sync"

// Bounds and defaults.
const (
	MaxContentBytes      = 4 << 20 // fs.read window, fs.write content, each edit text
	DefaultReadBytes     = 64 << 10
	DefaultListEntries   = 1000
	MaxListEntries       = 10_000
	DefaultSearchResults = 1000
	MaxSearchResults     = 10_000
	MaxQueryBytes        = 4096
	MaxMatchTextBytes    = 4096
	MaxEdits             = 256
	// DefaultMaxResponseBytes is the default budget for the JSON encoding of one result.
	DefaultMaxResponseBytes = 1 << 20
	// DefaultMaxEditFileBytes bounds the file fs.edit reads and the file it writes.
	DefaultMaxEditFileBytes = 16 << 20
	// DefaultMaxSearchFiles and DefaultMaxSearchDepth bound the work of one fs.search.
	DefaultMaxSearchFiles = 200_000
	DefaultMaxSearchDepth = 64
)

// Entry types.
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
)

// ListPayload is the payload of fs.list.
type ListPayload struct {
	Path       string `json:"path"`
	MaxEntries *int   `json:"maxEntries,omitempty"`
}

// ListEntry is one entry of a listing. Size is the byte size of a file and 0 for a directory.
type ListEntry struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt,omitempty"`
}

// ListResult is the result of fs.list.
type ListResult struct {
	Entries   []ListEntry `json:"entries"`
	Truncated bool        `json:"truncated"`
}

// StatPayload is the payload of fs.stat.
type StatPayload struct {
	Path string `json:"path"`
}

// StatResult is the result of fs.stat. Size is 0 for a directory.
type StatResult struct {
	Type       string `json:"type"`
	Size       int64  `json:"size"`
	ModifiedAt string `json:"modifiedAt,omitempty"`
}

// ReadPayload is the payload of fs.read.
type ReadPayload struct {
	Path     string `json:"path"`
	Offset   *int64 `json:"offset,omitempty"`
	MaxBytes *int64 `json:"maxBytes,omitempty"`
}

// ReadResult is the result of fs.read.
type ReadResult struct {
	Content   string `json:"content"`
	BytesRead int64  `json:"bytesRead"`
	EOF       bool   `json:"eof"`

	buf *[]byte // the pooled buffer Content shares, if any (see Release)
}

// Release hands the buffer a large read's Content shares back for later reads to reuse, so
// that a read of megabytes does not allocate and clear as much memory every time. Content must
// not be used afterwards; Release is optional (without it the buffer is garbage collected) and
// does nothing a second time.
func (r *ReadResult) Release() {
	if r.buf != nil {
		readBuffers.Put(r.buf)
		r.buf, r.Content = nil, ""
	}
}

// readBuffers holds buffers of maxReadBuffer bytes for reads of at least minPooledRead.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, maxReadBuffer); return &b }}

const (
	// maxReadBuffer is the most a read's buffer holds: the window with three bytes before it
	// and one after it.
	maxReadBuffer = MaxContentBytes + 4
	// minPooledRead is the smallest read buffer taken from readBuffers: below it a fresh
	// allocation costs little next to the rest of the read, and a default read (64 KiB) does
	// not hold a pooled buffer of 4 MiB.
	minPooledRead = 1 << 20
)

// SearchPayload is the payload of fs.search.
type SearchPayload struct {
	Path       string `json:"path"`
	Query      string `json:"query"`
	MaxResults *int   `json:"maxResults,omitempty"`
}

// SearchMatch is one matching line.
type SearchMatch struct {
	Path   string `json:"path"`
	Line   int64  `json:"line"`
	Column int64  `json:"column"`
	Text   string `json:"text"`
}

// SearchResult is the result of fs.search.
type SearchResult struct {
	Matches   []SearchMatch `json:"matches"`
	Truncated bool          `json:"truncated"`
}

// WritePayload is the payload of fs.write. Create defaults to true and Overwrite to false, so
// a bare write creates a new file and never clobbers one.
type WritePayload struct {
	Path           string  `json:"path"`
	Content        string  `json:"content"`
	Create         *bool   `json:"create,omitempty"`
	Overwrite      *bool   `json:"overwrite,omitempty"`
	ExpectedDigest *string `json:"expectedDigest,omitempty"`
}

// WriteResult is the result of fs.write.
type WriteResult struct {
	Created      bool   `json:"created"`
	BytesWritten int64  `json:"bytesWritten"`
	Digest       string `json:"digest"`
}

// Edit is one exact replacement.
type Edit struct {
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

// EditPayload is the payload of fs.edit.
type EditPayload struct {
	Path           string  `json:"path"`
	Edits          []Edit  `json:"edits"`
	ExpectedDigest *string `json:"expectedDigest,omitempty"`
}

// EditResult is the result of fs.edit.
type EditResult struct {
	Replacements int    `json:"replacements"`
	Digest       string `json:"digest"`
}
