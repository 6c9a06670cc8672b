//go:build cgo && !noxla

package hlo_test

import (
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/exceptions"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
	"github.com/stretchr/testify/require"

	"github.com/blockdiff/blockdiff/backend/hlo"
)

// inPlaceProgram builds, on b, a program of two f32[3] parameters with the given names
// whose outputs are a+b (f32[3]) and the sum of a (f32[]), and returns its StableHLO or
// the error compiling it.
func inPlaceProgram(b *hlo.Backend, name string, names ...string) (string, error) {
	g := NewGraph(b, name)
	err := exceptions.TryCatch[error](func() {
		a := Parameter(g, names[0], shapes.Make(dtypes.Float32, 3))
		c := Parameter(g, names[1], shapes.Make(dtypes.Float32, 3))
		if err := g.Compile(Add(a, c), ReduceAllSum(a)); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return "", err
	}
	text, err := hlo.Program(g.Executable())
	return string(text), err
}

func TestInPlaceParameters(t *testing.T) {
	text, err := inPlaceProgram(hlo.PlainBuildOnly(), "in_place", "state", "update"+hlo.InPlaceMarker+"0")
	require.NoError(t, err)
	require.Contains(t, text, "%arg1: tensor<3xf32> { tf.aliasing_output = 0 : i32 }")
	require.Equal(t, 1, strings.Count(text, "tf.aliasing_output"), text)

	for _, c := range []struct {
		names [2]string
		err   string
	}{
		{[2]string{"a" + hlo.InPlaceMarker + "2", "b"}, "names no output"},
		{[2]string{"a" + hlo.InPlaceMarker + "x", "b"}, "names no output"},
		{[2]string{"a" + hlo.InPlaceMarker + "1", "b"}, "but output 1 is (Float32)"},
		{[2]string{"a" + hlo.InPlaceMarker + "0", "b" + hlo.InPlaceMarker + "0"}, "both name output 0"},
	} {
		_, err := inPlaceProgram(hlo.PlainBuildOnly(), "bad", c.names[0], c.names[1])
		require.ErrorContains(t, err, c.err, "%v", c.names)
	}
}
