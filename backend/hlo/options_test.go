//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/gomlx/go-xla/pjrt"
	"github.com/stretchr/testify/require"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions("preallocate=false,notf32")
	require.NoError(t, err)
	require.Equal(t, options{client: pjrt.NamedValuesMap{"preallocate": false}, programOptions: programOptions{noTF32: true}}, o)

	o, err = parseOptions("")
	require.NoError(t, err)
	require.Equal(t, options{}, o)

	o, err = parseOptions("triton=gemv")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: programOptions{tritonGEMV: gemvWhereFaster}}, o)
	o, err = parseOptions("triton=gemv-all")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: programOptions{tritonGEMV: gemvAll}}, o)
	o, err = parseOptions("triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: programOptions{tritonAttention: true, tritonFold: true, tritonPDL: true, tritonRope: true,
		tritonNorm: true, tritonPlace: true}}, o)

	o, err = parseOptions("triton=preload")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: programOptions{tritonPreload: true}}, o)
	o, err = parseOptions("triton=fold,splitdown=2")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: programOptions{tritonFold: true, downSplits: 2}}, o)
	for _, bad := range []string{"splitdown", "splitdown=0", "splitdown=two", "splitdown=-2"} {
		_, err = parseOptions(bad)
		require.ErrorContains(t, err, "want splitdown=N", bad)
	}

	_, err = parseOptions("preallocate=maybe")
	require.Error(t, err)
	_, err = parseOptions("memory_fraction=0.5")
	require.ErrorContains(t, err, "unknown option")
	for _, bad := range []string{"triton", "triton=", "triton=gemm", "triton=GEMV"} {
		_, err = parseOptions(bad)
		require.ErrorContains(t, err, "unknown Triton kernels", bad)
	}

	b, err := NewBuildOnlyWith("notf32,triton=gemv")
	require.NoError(t, err)
	require.True(t, b.noTF32 && b.tritonGEMV == gemvWhereFaster && b.buildOnly())
	require.True(t, b.FastSingleRowProducts(), "1-row steps are faster with our GEMV")
	require.False(t, NewBuildOnly().FastSingleRowProducts(), "as on XLA's backend")
	_, err = NewBuildOnlyWith("triton=all")
	require.Error(t, err)
}
