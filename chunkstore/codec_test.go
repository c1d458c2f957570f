package chunkstore

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/klauspost/cpuid/v2"
	"github.com/klauspost/reedsolomon"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pureGoOptions turn off every vector path of reedsolomon.
var pureGoOptions = []reedsolomon.Option{
	reedsolomon.WithSSE2(false), reedsolomon.WithSSSE3(false), reedsolomon.WithAVX2(false),
	reedsolomon.WithAVX512(false), reedsolomon.WithGFNI(false), reedsolomon.WithAVXGFNI(false),
	reedsolomon.WithNEON(false), reedsolomon.WithSVE(false),
}

func TestGoldenSelfTest(t *testing.T) {
	for g := range goldenDigests {
		c, err := newCodec(g)
		require.NoError(t, err)
		d, err := c.checkGolden(nil)
		require.NoError(t, err, g.String())
		// The pure-Go path encodes the same bytes: the format does not
		// depend on the CPU.
		pure, err := newCodec(g, pureGoOptions...)
		require.NoError(t, err)
		pd, err := pure.goldenDigest()
		require.NoError(t, err)
		assert.Equal(t, d, pd, g.String())
		// A stored digest that differs is refused.
		other := d
		other[31] ^= 1
		_, err = c.checkGolden(&other)
		assert.ErrorIs(t, err, ErrGoldenMismatch)
	}
	// A different matrix option changes the parity: the self-test is what
	// would catch such a change.
	cauchy, err := newCodec(DefaultGeometry, reedsolomon.WithCauchyMatrix())
	require.NoError(t, err)
	_, err = cauchy.checkGolden(nil)
	assert.ErrorIs(t, err, ErrGoldenMismatch)
}

func TestSIMDPathInUse(t *testing.T) {
	path := SIMD()
	t.Logf("reedsolomon vector path: %s (%s, %s)", path, runtime.GOARCH, cpuid.CPU.BrandName)
	switch {
	case runtime.GOARCH == "amd64" && cpuid.CPU.Supports(cpuid.AVX2):
		assert.NotEqual(t, pureGo, path, "this CPU has AVX2; the coder must not fall back to pure Go")
	case runtime.GOARCH == "arm64" && cpuid.CPU.Supports(cpuid.ASIMD):
		assert.NotEqual(t, pureGo, path)
	default:
		assert.Equal(t, pureGo, path)
	}
	td := newTestDevices(t, 3)
	s := mustCreate(t, td, testOpts(Geometry{2, 1}, 4096)...)
	assert.Equal(t, path, s.Info().SIMD)
	require.NoError(t, s.Close())
}

func TestCodecReconstructsSectorRanges(t *testing.T) {
	// Reed-Solomon works column by column, so a sub-range of every shard
	// reconstructs the same sub-range: what readStripe relies on.
	c, err := newCodec(DefaultGeometry)
	require.NoError(t, err)
	shards := make([][]byte, 6)
	for i := range shards {
		shards[i] = make([]byte, 16384)
		if i < 4 {
			copy(shards[i], bytes.Repeat([]byte{byte(i + 1), byte(i * 7)}, 8192))
		}
	}
	require.NoError(t, c.encode(shards))
	sub := make([][]byte, 6)
	for i := range sub {
		sub[i] = bytes.Clone(shards[i][4096:8192])
	}
	sub[1], sub[3] = nil, nil
	require.NoError(t, c.reconstructData(sub, []bool{false, true, false, true}))
	assert.Equal(t, shards[1][4096:8192], sub[1])
	assert.Equal(t, shards[3][4096:8192], sub[3])
}
