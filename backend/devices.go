package backend

import (
	"fmt"
	"strings"
)

// goXLABackend is the name go-xla's backend registers under.
const goXLABackend = "xla"

// ForDevices returns the choice that runs programs over devices: c itself for one
// device; for more, where c is our StableHLO backend (which addresses one device),
// go-xla's backend on the same plugin, which partitions programs over the plugin's
// devices (XLA's SPMD partitioner, NCCL between GPUs). Our options are carried over
// where go-xla has them ("notf32" becomes "tf32=false"; "nokernels" is dropped: go-xla
// runs no kernels of ours). Other backends are returned as they are: the caller's
// device count check then says whether they address enough devices.
func ForDevices(c Choice, devices int) Choice {
	name, rest, _ := strings.Cut(c.Config, ":")
	if devices <= 1 || name != ourBackend {
		return c
	}
	parts := strings.Split(rest, ",")
	out := []string{parts[0]}
	for _, opt := range parts[1:] {
		switch opt {
		case "nokernels", "":
		case "notf32":
			out = append(out, "tf32=false")
		default:
			out = append(out, opt)
		}
	}
	return Choice{Config: goXLABackend + ":" + strings.Join(out, ","),
		Reason: fmt.Sprintf("%s; go-xla's backend on its plugin, to partition programs over %d devices", c.Reason, devices)}
}
