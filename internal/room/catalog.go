package room

import "encoding/json"

// KindCatalog is the kind of record that describes a provider's published capabilities
// (title, actions and their inputs) to a room. It is signed by the provider.
const KindCatalog = "catalog"

// CatalogBucket holds each provider's catalog of each room (key "<room>.<host>").
const CatalogBucket = "airlock_room_catalogs"

// Catalog is what a provider tells a room about the capabilities it published there: their
// descriptors, cut to the published actions. Like a projection it is discovery, never
// authority; the provider's own table decides every call.
type Catalog struct {
	Room     string `json:"room"`
	Provider HostID `json:"provider"`
	Version  uint64 `json:"version"`
	// Descriptors are capability descriptors in the capability adapter protocol's shape, as
	// JSON objects; this package does not interpret them.
	Descriptors []json.RawMessage `json:"descriptors"`
}

// SignCatalog encodes c as a catalog record signed by key, which must be c's provider.
func SignCatalog(key *HostKey, c Catalog) ([]byte, error) {
	if c.Provider != key.ID() || !ValidRoomID(c.Room) || len(c.Descriptors) > MaxPublicationsPerRoom {
		return nil, newError(CodeInvalidRecord, "catalog: bad room, provider or size")
	}
	if c.Descriptors == nil {
		c.Descriptors = []json.RawMessage{}
	}
	return signRecord(key, KindCatalog, c)
}

// OpenCatalog verifies a catalog record of provider and decodes it.
func OpenCatalog(data []byte, provider HostID) (Catalog, error) {
	var c Catalog
	if _, err := openRecord(data, KindCatalog, provider, &c); err != nil {
		return Catalog{}, err
	}
	if c.Provider != provider || !ValidRoomID(c.Room) || len(c.Descriptors) > MaxPublicationsPerRoom {
		return Catalog{}, newError(CodeInvalidRecord, "catalog of another provider")
	}
	return c, nil
}
