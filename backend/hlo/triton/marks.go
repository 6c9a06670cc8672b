package triton

// The marks every kernel's text has where, under PDL, it waits for the kernels before
// it and where it lets the next one launch: MLIR comments otherwise (see
// Kernels.PDL). The texts are written without cgo; only the calls need it.
const (
	waitMark   = "    // pdl: wait for the kernels before this one\n"
	launchMark = "    // pdl: let the next kernel launch\n"
)
