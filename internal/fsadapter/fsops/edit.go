package fsops

import (
	"strings"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/protocol"
)

// CheckEdits checks an fs.edit payload's edits as Edit does before it opens the file: 1 to
// MaxEdits edits, each oldText non-empty, each text at most MaxContentBytes of UTF-8. It is
// exported, with ApplyEdits, so that airlock mcp's edit preview (fs_edit_preview) refuses and
// applies an edit by exactly the rules airlock-fs applies it with.
func CheckEdits(edits []Edit) *protocol.Error {
	if len(edits) < 1 || len(edits) > MaxEdits {
		return argError("edits", "edits must hold 1 to %d items", MaxEdits)
	}
	for i, e := range edits {
		switch {
		case e.OldText == "":
			return argError("edits", "oldText must not be empty").With(DetailEdit, i)
		case len(e.OldText) > MaxContentBytes || len(e.NewText) > MaxContentBytes:
			return protocol.Errorf(CodeTooLarge, "edit text exceeds %d bytes", MaxContentBytes).
				With(DetailField, "edits").With(DetailEdit, i)
		case !utf8.ValidString(e.OldText) || !utf8.ValidString(e.NewText):
			return protocol.Errorf(CodeNotUTF8, "edit text is not valid UTF-8").With(DetailEdit, i)
		}
	}
	return nil
}

// ApplyEdits applies edits in order to text, as fs.edit does: each oldText must occur exactly
// once (overlapping occurrences count) in the text as the previous edits left it, else
// edit_not_found or edit_ambiguous with details.edit naming the edit; a result longer than
// limit bytes fails too_large. Nothing is partly applied: on failure the text is "".
func ApplyEdits(text string, edits []Edit, limit int) (string, *protocol.Error) {
	for i, e := range edits {
		at := strings.Index(text, e.OldText)
		if at < 0 {
			return "", protocol.Errorf(CodeEditNotFound, "edit %d: oldText does not occur", i).With(DetailEdit, i)
		}
		if strings.Contains(text[at+1:], e.OldText) {
			return "", protocol.Errorf(CodeEditAmbiguous, "edit %d: oldText occurs more than once", i).With(DetailEdit, i)
		}
		if len(text)-len(e.OldText)+len(e.NewText) > limit {
			return "", protocol.Errorf(CodeTooLarge, "edit %d: the file would exceed %d bytes", i, limit).With(DetailEdit, i)
		}
		text = text[:at] + e.NewText + text[at+len(e.OldText):]
	}
	return text, nil
}
