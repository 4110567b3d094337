//go:build !unix

package room

// noFollow is zero where the system has no O_NOFOLLOW; the mode check still applies.
const noFollow = 0
