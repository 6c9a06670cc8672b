//go:build cgo && !noxla && !linux

package hlo

// cudaComputeCapability returns -1: the CUDA plugin runs on Linux only.
func cudaComputeCapability(int) int { return -1 }
