//go:build cgo && !noxla

package backend

import _ "github.com/gomlx/go-xla/compute/xla" // Registers the "xla" backend.

const xlaAvailable = true
