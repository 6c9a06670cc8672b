//go:build cgo && !noxla

package backend

import (
	_ "github.com/gomlx/go-xla/compute/xla" // Registers the "xla" backend.

	"github.com/blockdiff/blockdiff/backend/hlo"
)

const xlaAvailable = true

// go-xla registers its backend under "hlo" too, as an alias of "xla"; this package's
// init runs after both packages', so "hlo" ends up naming ours.
func init() { hlo.Register() }
