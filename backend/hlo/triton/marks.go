package triton

import "strings"

// The marks every kernel's text has where, under PDL, it waits for the kernels before
// it and where it lets the next one launch: MLIR comments otherwise (see
// Kernels.PDL). The texts are written without cgo; only the calls need it.
const (
	waitMark   = "    // pdl: wait for the kernels before this one\n"
	launchMark = "    // pdl: let the next kernel launch\n"
)

// launchAfterWait moves a kernel's launch mark to just after its wait mark, so that
// under PDL the next kernel launches as soon as this one's programs have waited
// (Kernels.Preload).
func launchAfterWait(ir string) string {
	return strings.Replace(strings.Replace(ir, launchMark, "", 1), waitMark, waitMark+launchMark, 1)
}
