//go:build !cgo || noxla

package backend

const xlaAvailable = false
