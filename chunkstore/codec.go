package chunkstore

import (
	"crypto/sha256"
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// codec is the erasure code of a store. Its options are on-disk format:
// stored parity is only reconstructible by the same matrix over the same
// field. We use reedsolomon's default: a systematic Vandermonde matrix over
// GF(2^8), no Leopard, no Cauchy, no Jerasure or PAR1 matrix. The golden
// self-test (goldenDigest) pins that choice at every Open.
type codec struct {
	geo Geometry
	rs  reedsolomon.Encoder // nil for M = 0: plain storage has no code
}

// codecOptions returns the reedsolomon options the store encodes with.
// Only options that do not change the output belong here: SIMD selection
// is left to reedsolomon's CPU detection (see SIMD).
func codecOptions() []reedsolomon.Option { return nil }

func newCodec(g Geometry, extra ...reedsolomon.Option) (*codec, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	c := &codec{geo: g}
	if g.Parity == 0 {
		return c, nil
	}
	rs, err := reedsolomon.New(g.Data, g.Parity, append(codecOptions(), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("chunkstore: reedsolomon %s: %w", g, err)
	}
	c.rs = rs
	return c, nil
}

// encode fills shards[K:] with parity of shards[:K]; all have one length.
func (c *codec) encode(shards [][]byte) error {
	if c.rs == nil {
		return nil
	}
	return c.rs.Encode(shards)
}

// reconstructData fills the data shards marked in required (len K) from
// any K present shards (nil or empty means absent).
func (c *codec) reconstructData(shards [][]byte, required []bool) error {
	if c.rs == nil {
		return ErrTooManyFailures
	}
	if err := c.rs.ReconstructSome(shards, required); err != nil {
		return fmt.Errorf("%w: %v", ErrTooManyFailures, err)
	}
	return nil
}

// reconstruct fills every absent shard, data and parity.
func (c *codec) reconstruct(shards [][]byte) error {
	if c.rs == nil {
		return ErrTooManyFailures
	}
	if err := c.rs.Reconstruct(shards); err != nil {
		return fmt.Errorf("%w: %v", ErrTooManyFailures, err)
	}
	return nil
}

// verify reports whether the parity matches the data.
func (c *codec) verify(shards [][]byte) (bool, error) {
	if c.rs == nil {
		return true, nil
	}
	return c.rs.Verify(shards)
}

// goldenShardSize is the shard length of the golden self-test input.
const goldenShardSize = 256

// goldenInput returns the fixed data shards of the self-test.
func goldenInput(k int) [][]byte {
	shards := make([][]byte, k)
	for i := range shards {
		shards[i] = make([]byte, goldenShardSize)
		for j := range shards[i] {
			shards[i][j] = byte(i*131+j*7+13) ^ byte(j>>3)
		}
	}
	return shards
}

// goldenDigest encodes the fixed input and returns the SHA-256 of the
// parity it produced. A store records it in every identity record when it
// is created and compares at every Open.
func (c *codec) goldenDigest() ([32]byte, error) {
	shards := goldenInput(c.geo.Data)
	for range c.geo.Parity {
		shards = append(shards, make([]byte, goldenShardSize))
	}
	if err := c.encode(shards); err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	for _, p := range shards[c.geo.Data:] {
		h.Write(p)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d, nil
}

// goldenDigests are the parity digests of the golden input for common
// geometries, computed once and pinned here, as MinIO does: a new store
// of one of these geometries must encode exactly like every earlier one.
var goldenDigests = map[Geometry]string{
	{Data: 1, Parity: 0}:  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	{Data: 1, Parity: 1}:  "17be49ec62016de132a5acb5722e1d6bf575a45900ea552a94f1f80428857a70",
	{Data: 1, Parity: 2}:  "5fad64467b21239d6c1b5fba0f0b2687ed1ca0505fab5ad7b6e4349ab47cd8c1",
	{Data: 2, Parity: 1}:  "bd5d7642dc0a781503fa245cd3804f9dacff20c9a029f20d9d3dbce679c89c7b",
	{Data: 2, Parity: 2}:  "c7c963fd312defaf21c88c998043885089ae0fe0814d2eaf722f42ac2ec50792",
	{Data: 3, Parity: 1}:  "a6e094693a8e5f8ce052a4ad7a07b6b65faee5e0460996c7f70b01856199f5c6",
	{Data: 3, Parity: 2}:  "3d287d3edd180548fb18e08856f7e48851d856f1e7004b2f4fe483e011a5ff35",
	{Data: 4, Parity: 1}:  "99376e07086cdc025e5a7d39f0aac09dae61a85ef2ab927b2107c13be3a47e88",
	{Data: 4, Parity: 2}:  "0d7bf665bf8bdc3d33289d8b2b403b47305080393c1dbbefcce7d2bfd840a7a8",
	{Data: 4, Parity: 3}:  "6d8d1fb3ce8ab78b1995d03c4adba44eeba3e3145846933642b774b0cc881dc2",
	{Data: 5, Parity: 2}:  "a79edb5b1021a66d9a93aea13f2e076176153376f40f9f7f4110e04969ed0d4b",
	{Data: 6, Parity: 2}:  "7d83d39bf93cc93cdf0050fb756bd9816d90d367a02b63c7afefbff9a655fcc0",
	{Data: 6, Parity: 3}:  "b64db504314c68e892fa0811350cb620ea5803d720ade09e156bfba08cd16b6e",
	{Data: 8, Parity: 2}:  "4813a3ac3ea3e7f4c9c2b0658653e8fdf5c3879904c8cb72004fde8ce4cdd64b",
	{Data: 8, Parity: 3}:  "823ca4fa21d69ed99064415efa041cecea160e71251d417e175b326bd03be1fb",
	{Data: 8, Parity: 4}:  "b5ec59e2b502c75337cde9467a9372e15ebb97b9296df1174d123b06de0c81e4",
	{Data: 10, Parity: 4}: "cedb5dd8cea0d9d39250de9021de7bb8048d3f614246b59fc669b1c410eb7e57",
	{Data: 12, Parity: 4}: "d48fac2b9b18191d7e65dc8419d0cde218294d8bbdd49f18e4285cec9aafaf9c",
	{Data: 16, Parity: 4}: "78fd2c56b1dd16765f98bff8b8116ce0bfb329f2993aedb23a5c5bf57d464bb9",
}

// checkGolden runs the self-test: against the digest stored with the
// store (stored may be nil at Create) and the pinned table.
func (c *codec) checkGolden(stored *[32]byte) ([32]byte, error) {
	d, err := c.goldenDigest()
	if err != nil {
		return d, fmt.Errorf("%w: %v", ErrGoldenMismatch, err)
	}
	if want, ok := goldenDigests[c.geo]; ok && fmt.Sprintf("%x", d) != want {
		return d, fmt.Errorf("%w: %s parity digest %x, pinned %s", ErrGoldenMismatch, c.geo, d, want)
	}
	if stored != nil && *stored != d {
		return d, fmt.Errorf("%w: %s parity digest %x, the store was written with %x", ErrGoldenMismatch, c.geo, d, *stored)
	}
	return d, nil
}
