package modelcore

import (
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/stretchr/testify/require"
)

// A program compiled with InPlace consumes that input and computes as without it;
// pairs that do not fit the program are compile errors.
func TestInPlace(t *testing.T) {
	m := randomModel(t, tinyConfig(), 1)
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, 3), shapes.Make(dtypes.Int32), shapes.Make(dtypes.Int32)}
	addTo := func(_ *Weights, in []*Node) []*Node { return []*Node{Add(in[0], in[1]), Add(in[1], in[2])} }

	p, err := m.Compile("in_place", inputs, addTo, InPlace(0, 0))
	require.NoError(t, err)
	x := tensors.FromValue([]int32{1, 2, 3})
	require.NoError(t, x.MaterializeOnDevice(m.Backend(), true, 0))
	x.FinalizeLocal() // its only value is now on the device, which the program consumes
	out, err := p.Run(x, tensors.FromScalar(int32(1)), tensors.FromScalar(int32(2)))
	require.NoError(t, err)
	require.Equal(t, []int32{2, 3, 4}, tensors.MustCopyFlatData[int32](out[0]))
	require.False(t, x.Ok(), "the input was donated")

	for _, c := range []struct {
		pairs []ProgramOption
		err   string
	}{
		{[]ProgramOption{InPlace(1, 0)}, "input (Int32), output (Int32)[3]"},
		{[]ProgramOption{InPlace(0, 2)}, "3 inputs and 2 outputs"},
		{[]ProgramOption{InPlace(3, 0)}, "3 inputs and 2 outputs"},
		{[]ProgramOption{InPlace(1, 1), InPlace(2, 1)}, "share an output"},
	} {
		_, err := m.Compile("bad", inputs, addTo, c.pairs...)
		require.ErrorContains(t, err, c.err)
	}
}
