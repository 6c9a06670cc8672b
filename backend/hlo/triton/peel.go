package triton

import (
	"fmt"
	"regexp"
	"strings"
)

// kLoopHead matches the head of a 1-row GEMV kernel's K loop: its results, its
// iter_args and its types.
var kLoopHead = regexp.MustCompile(`(?m)^    (%[\w:#]+) = scf\.for %k = %c0 to %cK step %cBK iter_args\((.*)\) -> \((.*)\) : i32 \{\n`)

// ssaDefinition matches a value defined on a line of a loop's body.
var ssaDefinition = regexp.MustCompile(`(?m)^\s*(%\w+) = `)

// wLoad matches the load of the step's W tile in a 1-row kernel's loop (wTile).
var wLoad = regexp.MustCompile(`(?m)^      %wv = tt\.load %wp : (.*)\n`)

// firstWBeforeWait rewrites a 1-row GEMV kernel so that each program loads its first
// [BN, BK] tile of W before it waits for the kernels before it (W is a constant that
// no kernel writes), as the PyTorch peer's GEMVs do: the loop's first step is peeled
// and takes that tile, the loop runs from the second step, and the wait moves to just
// before the peeled step (nothing before it reads memory). With the early launch
// trigger, the programs of the next kernel, placed while this one runs, then stream
// weights instead of idling.
func firstWBeforeWait(name, ir string) (string, error) {
	head := kLoopHead.FindStringSubmatchIndex(ir)
	if head == nil || strings.Count(ir, waitMark) != 1 {
		return "", fmt.Errorf("triton: kernel %s has no 1-row K loop to peel", name)
	}
	bodyStart := head[1]
	bodyLen := strings.Index(ir[bodyStart:], "\n    }")
	if bodyLen < 0 {
		return "", fmt.Errorf("triton: kernel %s: its K loop does not end", name)
	}
	body := ir[bodyStart : bodyStart+bodyLen+1]
	load := wLoad.FindStringSubmatch(body)
	yieldAt := strings.LastIndex(body, "      scf.yield ")
	if load == nil || yieldAt < 0 {
		return "", fmt.Errorf("triton: kernel %s: its K loop has no W load or yield", name)
	}
	yields, _, _ := strings.Cut(strings.TrimPrefix(body[yieldAt:], "      scf.yield "), " : ")

	// The peeled step: the body at k = 0 without its W load, its values renamed, the
	// iter args their initial values, W's tile the one loaded before the wait.
	step := wLoad.ReplaceAllString(body[:yieldAt], "")
	pairs := []string{"%k", "%c0", "%wv", "%wfirst"}
	for _, def := range ssaDefinition.FindAllStringSubmatch(step, -1) {
		pairs = append(pairs, def[1], def[1]+"_0")
	}
	iterArgs := ir[head[4]:head[5]]
	var args []string
	for arg := range strings.SplitSeq(iterArgs, ", ") {
		argName, init, ok := strings.Cut(arg, " = ")
		if !ok {
			return "", fmt.Errorf("triton: kernel %s: iter_args %q", name, arg)
		}
		pairs = append(pairs, argName, init)
		args = append(args, argName)
	}
	step = renameValues(step, pairs)
	yielded := strings.Split(yields, ", ")
	if len(yielded) != len(args) {
		return "", fmt.Errorf("triton: kernel %s: %d values yielded for %d iter_args", name, len(yielded), len(args))
	}
	for i, y := range yielded {
		yielded[i] = args[i] + " = " + renameValues(y, pairs)
	}
	loop := strings.Replace(ir[head[0]:head[1]], "%k = %c0 to", "%k = %cBK to", 1)
	loop = strings.Replace(loop, "iter_args("+iterArgs+")", "iter_args("+strings.Join(yielded, ", ")+")", 1)
	prologue := "    %wfirst = tt.load %wp0 : " + load[1] + "\n" + waitMark + step
	out := strings.Replace(ir[:head[0]], waitMark, "", 1) + prologue + loop + ir[head[1]:]
	return out, nil
}

// renameValues replaces each whole SSA name of pairs (old, new, …) in text.
func renameValues(text string, pairs []string) string {
	names := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		names[pairs[i]] = pairs[i+1]
	}
	return ssaName.ReplaceAllStringFunc(text, func(n string) string {
		if r, ok := names[n]; ok {
			return r
		}
		return n
	})
}

// ssaName matches an SSA value's name.
var ssaName = regexp.MustCompile(`%[\w]+`)
