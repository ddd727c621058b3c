//go:build !kagent_v0_10

// kagent v0.9.11's spelling of the three calls whose signatures changed in v0.10.
package main

import (
	"context"
	"time"

	dbpkg "github.com/kagent-dev/kagent/go/api/database"
	"github.com/kagent-dev/kagent/go/core/internal/a2a"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver"
	"github.com/kagent-dev/kagent/go/core/pkg/auth"
	"github.com/kagent-dev/kagent/go/core/pkg/migrations"
)

// runMigrations applies the core track, and the vector track when vector is on.
func runMigrations(_ context.Context, url string, vector bool) error {
	return migrations.RunUp(url, migrations.FS, vector)
}

// newA2AMux is kagent's A2A proxy; v0.9.11 keeps no tasks of its own.
func newA2AMux(authn auth.AuthProvider, _ dbpkg.Client) a2a.A2AHandlerMux {
	return a2a.NewA2AHttpMux(httpserver.APIPathA2A, httpserver.APIPathA2ASandboxes, authn)
}

// cleanupLoop prunes expired memories every interval.
func cleanupLoop(db dbpkg.Client, interval time.Duration) *httpserver.MemoryCleanupRunnable {
	return httpserver.NewMemoryCleanupRunnable(db, interval)
}
