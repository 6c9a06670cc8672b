//go:build cgo && !noxla

package backend

import (
	_ "github.com/gomlx/go-xla/compute/xla" // Registers the "xla" backend.

	_ "github.com/blockdiff/blockdiff/backend/hlo" // Registers our "bdxla" backend.
)

const xlaAvailable = true
