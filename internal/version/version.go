// Package version holds the airlock release version, set at link time with
// -ldflags "-X github.com/airlockhq/airlock/internal/version.Version=v1.2.3".
package version

// Version is the release version; "dev" in an unreleased build.
var Version = "dev"
