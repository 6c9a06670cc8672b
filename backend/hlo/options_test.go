//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/gomlx/go-xla/pjrt"
	"github.com/stretchr/testify/require"
)

// A configuration's options: by default every kernel of ours (defaultKernels), none
// with nokernels; notf32 and preallocate either way; experiments' knobs are errors.
func TestParseOptions(t *testing.T) {
	o, err := parseOptions("")
	require.NoError(t, err)
	require.Equal(t, options{programOptions: defaultKernels}, o)

	o, err = parseOptions("preallocate=false,notf32")
	require.NoError(t, err)
	want := defaultKernels
	want.noTF32 = true
	require.Equal(t, options{client: pjrt.NamedValuesMap{"preallocate": false}, programOptions: want}, o)

	for _, list := range []string{"nokernels,notf32", "notf32,nokernels"} {
		o, err = parseOptions(list)
		require.NoError(t, err)
		require.Equal(t, options{programOptions: programOptions{noTF32: true}}, o, list)
	}

	_, err = parseOptions("preallocate=maybe")
	require.Error(t, err)
	for _, bad := range []string{"memory_fraction=0.5", "triton=gemv", "splitdown=2", "kernels"} {
		_, err = parseOptions(bad)
		require.ErrorContains(t, err, "unknown option", bad)
	}

	b, err := NewBuildOnlyWith("notf32")
	require.NoError(t, err)
	require.True(t, b.noTF32 && b.tritonGEMV == gemvWhereFaster && b.buildOnly())
	require.True(t, b.FastSingleRowProducts(), "1-row steps are faster with our GEMV")
	require.True(t, b.PlacesWindows() && b.FusedAttentionOverCache())
	require.Equal(t, defaultKernels, NewBuildOnly().programOptions)
	b, err = NewBuildOnlyWith("nokernels")
	require.NoError(t, err)
	require.False(t, b.FastSingleRowProducts(), "as on XLA's backend")
	require.False(t, b.PlacesWindows() || b.FusedAttentionOverCache())
}

// The experiments' knobs (export_test.go) pick kernels one by one, from none.
func TestParseKnobs(t *testing.T) {
	o, err := parseKnobs("")
	require.NoError(t, err)
	require.Equal(t, programOptions{}, o)
	o, err = parseKnobs("triton=gemv")
	require.NoError(t, err)
	require.Equal(t, programOptions{tritonGEMV: gemvWhereFaster}, o)
	o, err = parseKnobs("triton=gemv-all,notf32")
	require.NoError(t, err)
	require.Equal(t, programOptions{tritonGEMV: gemvAll, noTF32: true}, o)
	o, err = parseKnobs("triton=gemv,triton=attention,triton=fold,triton=pdl,triton=rope,triton=norm,triton=place,triton=preload,splitdown=2")
	require.NoError(t, err)
	require.Equal(t, defaultKernels, o, "the knobs' spelling of the defaults")
	for _, bad := range []string{"splitdown", "splitdown=0", "splitdown=two", "splitdown=-2"} {
		_, err = parseKnobs(bad)
		require.ErrorContains(t, err, "want splitdown=N", bad)
	}
	for _, bad := range []string{"triton", "triton=", "triton=gemm", "triton=GEMV"} {
		_, err = parseKnobs(bad)
		require.ErrorContains(t, err, "unknown Triton kernels", bad)
	}
	_, err = parseKnobs("nokernels")
	require.ErrorContains(t, err, "unknown knob")
}
