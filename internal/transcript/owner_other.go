//go:build !unix

package transcript

import "io/fs"

// openNoFollow is zero where there is no O_NOFOLLOW. It is never used: ownerUID fails first.
const openNoFollow = 0

// ownerUID cannot tell the owner of a file on this platform, so Create and Open fail closed
// with insecure_state_path.
func ownerUID(fs.FileInfo) (uint32, bool) { return 0, false }
