//go:build !unix

package store

import (
	"io/fs"
	"os"
)

// openNoFollow is zero where there is no O_NOFOLLOW. It is never used: ownerUID fails first.
const openNoFollow = 0

// ownerUID cannot tell the owner of a file on this platform, so Open fails closed with
// insecure_state_path.
func ownerUID(fs.FileInfo) (uint32, bool) { return 0, false }

// unlockFile has nothing to do where Open cannot get past ownerUID.
func unlockFile(*os.File) {}
