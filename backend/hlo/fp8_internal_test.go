//go:build cgo && !noxla

package hlo

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// e4m3Values' int8 bitcast and the convert reading it become f8E4M3FN in the module's
// text, nothing else; a name without exactly one of each is an error.
func TestRetypeE4M3(t *testing.T) {
	text := `    %3 = "stablehlo.bitcast_convert"(%w) : (tensor<8x4xui8>) -> tensor<8x4xi8>
    %4 = "stablehlo.convert"(%3) : (tensor<8x4xi8>) -> tensor<8x4xbf16>
    %33 = "stablehlo.convert"(%30) : (tensor<8x4xi8>) -> tensor<8x4xbf16>`
	got, err := retypeE4M3([]byte(text), []string{"%3"})
	require.NoError(t, err)
	require.Equal(t, `    %3 = "stablehlo.bitcast_convert"(%w) : (tensor<8x4xui8>) -> tensor<8x4xf8E4M3FN>
    %4 = "stablehlo.convert"(%3) : (tensor<8x4xf8E4M3FN>) -> tensor<8x4xbf16>
    %33 = "stablehlo.convert"(%30) : (tensor<8x4xi8>) -> tensor<8x4xbf16>`, string(got))
	_, err = retypeE4M3([]byte(text), []string{"%5"})
	require.ErrorContains(t, err, "0 definitions and 0 conversions")
}
