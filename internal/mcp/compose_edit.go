package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/fsadapter/fsops"
	"github.com/airlockhq/airlock/internal/protocol"
	"github.com/airlockhq/airlock/internal/tooladapter"
)

// fs_edit_preview: what fs_edit would do, as a unified diff, without writing. Its arguments
// are fs_edit's, refused by the same checks (the daemon's payload check, then airlock-fs's
// CheckEdits); the file is read whole through fs.read and the edits are applied in memory by
// airlock-fs's own ApplyEdits, so an edit that fs_edit would refuse (edit_not_found,
// edit_ambiguous, too_large, digest_mismatch) is refused here with the same code and
// details.edit. It never calls fs.edit or fs.write. The file can change between the preview
// and the edit: the result's digest is the SHA-256 of the content the preview read, and
// fs_edit with the same edits and expectedDigest set to it applies exactly the change shown,
// or fails digest_mismatch.

func editPreviewTool(l tooladapter.Limits) *sdk.Tool {
	edit := fsTool(tooladapter.OpEdit, l)
	return readOnlyTool("edit preview",
		"Show what fs_edit would change, as a unified diff, without writing anything. Same arguments and matching as fs_edit. "+
			"To apply exactly the change shown, call fs_edit with the same edits and expectedDigest set to the digest returned.",
		edit.InputSchema.(schema),
		closedObject([]string{"diff", "replacements", "digest", "newDigest", "truncated"}, schema{
			"diff":         schema{"type": "string", "description": "Unified diff (diff -u) from the file to the file as edited; empty when nothing changes."},
			"replacements": schema{"type": "integer", "minimum": 0},
			"digest":       schema{"type": "string", "pattern": "^[a-f0-9]{64}$", "description": "SHA-256 of the file as read: fs_edit's expectedDigest."},
			"newDigest":    schema{"type": "string", "pattern": "^[a-f0-9]{64}$", "description": "SHA-256 the file would have after fs_edit."},
			"truncated":    schema{"type": "boolean", "description": "The diff is longer than one response: the first hunks are shown."},
		}))
}

func runEditPreview(c *composedCall, args json.RawMessage) (*sdk.CallToolResult, *protocol.Error) {
	if perr := tooladapter.ValidatePayload(tooladapter.OpEdit, args); perr != nil {
		return nil, perr // what the daemon answers fs_edit with these arguments
	}
	var p fsops.EditPayload
	if err := json.Unmarshal(args, &p); err != nil {
		return nil, &protocol.Error{Code: tooladapter.CodeRequestInvalid, Message: "payload is not fs.edit's"}
	}
	if perr := fsops.CheckEdits(p.Edits); perr != nil {
		return nil, perr
	}
	limit := fsops.DefaultMaxEditFileBytes
	var buf strings.Builder
	var off int64
	for {
		r, perr := c.read(p.Path, off, c.budget)
		if perr != nil {
			return nil, perr
		}
		buf.WriteString(r.Content)
		off += r.BytesRead
		if off > int64(limit) {
			return nil, protocol.Errorf(fsops.CodeTooLarge, "file exceeds %d bytes", limit)
		}
		if r.EOF {
			break
		}
		if r.BytesRead == 0 {
			return nil, &protocol.Error{Code: protocol.CodeInternal, Message: "fs.read returned nothing before the end of the file"}
		}
	}
	before := buf.String()
	sum := sha256.Sum256([]byte(before))
	digest := hex.EncodeToString(sum[:])
	if p.ExpectedDigest != nil && *p.ExpectedDigest != digest {
		return nil, protocol.Errorf(fsops.CodeDigestMismatch, "the file's digest differs from expectedDigest")
	}
	after, perr := fsops.ApplyEdits(before, p.Edits, limit)
	if perr != nil {
		return nil, perr
	}
	sum = sha256.Sum256([]byte(after))
	res := struct {
		Diff         string `json:"diff"`
		Replacements int    `json:"replacements"`
		Digest       string `json:"digest"`
		NewDigest    string `json:"newDigest"`
		Truncated    bool   `json:"truncated"`
	}{Replacements: len(p.Edits), Digest: digest, NewDigest: hex.EncodeToString(sum[:])}
	res.Diff, res.Truncated = unifiedDiff(p.Path, before, after, int(c.budget))
	text := res.Diff
	switch {
	case res.Diff == "":
		text = "(no change: the edits leave the file as it is)\n"
	case res.Truncated:
		text += "(truncated: the diff is longer than one response; these are its first hunks)\n"
	}
	text += "(dry run: nothing was written; " + strconv.Itoa(res.Replacements) + " replacements; fs_edit with expectedDigest " +
		digest + " applies exactly this)\n"
	return composedResult(res, text), nil
}
