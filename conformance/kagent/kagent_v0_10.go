//go:build kagent_v0_10

// kagent v0.10.0-rc3's spelling of the three calls whose signatures changed since v0.9.11.
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

// runMigrations applies the built-in tracks (core, then vector when vector is on).
func runMigrations(ctx context.Context, url string, vector bool) error {
	return migrations.RunUp(ctx, url, migrations.BuiltinSources(vector))
}

// newA2AMux is kagent's A2A proxy with the DB client as its task store (tasks/list is served
// from it, scoped to the caller or a share's owner), as go/core/pkg/app wires it.
func newA2AMux(authn auth.AuthProvider, db dbpkg.Client) a2a.A2AHandlerMux {
	return a2a.NewA2AHttpMux(httpserver.APIPathA2A, httpserver.APIPathA2ASandboxes, authn, db)
}

// cleanupLoop prunes expired memories every interval; session retention stays off (kagent's
// default, --session-retention-days 0).
func cleanupLoop(db dbpkg.Client, interval time.Duration) *httpserver.DbCleanupRunnable {
	return httpserver.NewDbCleanupRunnable(db, interval, 0)
}
