package room

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"sync"
)

// Labels of the link keys. Every key is derived for one purpose (calls or replies) of one
// directed link (caller → provider), so no MAC made for one purpose or direction verifies for
// another: a reply can never pass as a call, nor a call from B to A as one from A to B.
const (
	linkSalt       = "airlock-room-link-v1"
	linkCallLabel  = "airlock-room-call-mac-v1"
	linkReplyLabel = "airlock-room-reply-mac-v1"
)

// maxLinks bounds a host key's cache of link keys. A roster holds at most MaxMembers hosts,
// so this covers every peer of several full rooms; past it, an entry is dropped and derived
// again when needed.
const maxLinks = 4 * MaxMembers

// linkKeys are the two HMAC-SHA256 keys of one directed link, from a caller host to a
// provider host: call authenticates the caller's calls, reply the provider's replies. Only
// the two hosts can derive them.
type linkKeys struct {
	call, reply [32]byte
}

// macCall is the MAC of a call's canonical bytes.
func (l *linkKeys) macCall(msg []byte) []byte { return mac(l.call[:], msg) }

// macReply is the MAC of a reply's canonical bytes.
func (l *linkKeys) macReply(msg []byte) []byte { return mac(l.reply[:], msg) }

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// linkCache holds, per peer and per X25519 key of that peer, the links of both directions.
// It is keyed by the peer's key as well as its id, so a peer's changed key derives new links
// and the old ones are never found for the new key.
type linkCache struct {
	mu sync.Mutex
	m  map[linkID]*linkPair
}

type linkID struct {
	peer HostID
	pub  [32]byte
}

// linkPair is the link from this host to a peer (out: this host calls) and back (in: the peer
// calls).
type linkPair struct{ out, in linkKeys }

// link returns the keys of the link from caller to provider, one of which is k's host and
// the other peer, whose verified X25519 public key is peerPub.
func (k *HostKey) link(caller, provider HostID, peerPub *ecdh.PublicKey) (*linkKeys, error) {
	peer := provider
	if peer == k.id {
		peer = caller
	}
	if caller != k.id && provider != k.id {
		return nil, newError(CodeUnauthorized, "link: neither end is this host")
	}
	id := linkID{peer: peer}
	copy(id.pub[:], peerPub.Bytes())
	pair, err := k.linkPair(id, peerPub)
	if err != nil {
		return nil, err
	}
	if caller == k.id {
		return &pair.out, nil
	}
	return &pair.in, nil
}

func (k *HostKey) linkPair(id linkID, peerPub *ecdh.PublicKey) (*linkPair, error) {
	c := &k.links
	c.mu.Lock()
	pair, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return pair, nil
	}
	shared, err := k.kx.ECDH(peerPub)
	if err != nil {
		// A low-order point: no key agreement with it authenticates anyone.
		return nil, newError(CodeUnauthorized, "link: unusable X25519 key")
	}
	prk, err := hkdf.Extract(sha256.New, shared, []byte(linkSalt))
	if err != nil {
		return nil, newError(CodeInternal, "link: key derivation")
	}
	pair = &linkPair{}
	if err := deriveLink(&pair.out, prk, k.id, id.peer, k.kxPub, id.pub); err != nil {
		return nil, err
	}
	if err := deriveLink(&pair.in, prk, id.peer, k.id, id.pub, k.kxPub); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[linkID]*linkPair)
	}
	if len(c.m) >= maxLinks {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[id] = pair
	return pair, nil
}

// cachedLinks is how many peer keys the cache holds (tests).
func (k *HostKey) cachedLinks() int {
	k.links.mu.Lock()
	defer k.links.mu.Unlock()
	return len(k.links.m)
}

// deriveLink expands the shared secret's PRK into the keys of the link from caller to
// provider. The info names the purpose, both host ids and both X25519 keys in that order, so
// the keys are bound to the identities and keys the two hosts verified.
func deriveLink(l *linkKeys, prk []byte, caller, provider HostID, callerPub, providerPub [32]byte) error {
	for _, k := range []struct {
		label string
		out   *[32]byte
	}{{linkCallLabel, &l.call}, {linkReplyLabel, &l.reply}} {
		info := make([]byte, 0, 256)
		info = appendField(info, k.label)
		info = appendField(info, string(caller))
		info = appendField(info, string(provider))
		info = append(info, callerPub[:]...)
		info = append(info, providerPub[:]...)
		key, err := hkdf.Expand(sha256.New, prk, string(info), 32)
		if err != nil {
			return newError(CodeInternal, "link: key derivation")
		}
		copy(k.out[:], key)
	}
	return nil
}
