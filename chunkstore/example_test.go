package chunkstore_test

import (
	"fmt"
	"os"

	"github.com/capsule-storage/capsule/chunkstore"
)

// A 4+2 store on six directories, one volume, a write, a flush, a read.
func Example() {
	data, _ := os.MkdirTemp("", "chunkstore-example-")
	defer os.RemoveAll(data)

	s, err := chunkstore.CreateDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	v, _ := s.CreateVolume("ns1", 1<<30)
	if _, err := v.WriteAt([]byte("hello, erasure"), 4096); err != nil {
		fmt.Println(err)
		return
	}
	if err := v.Sync(); err != nil { // NVMe Flush
		fmt.Println(err)
		return
	}
	buf := make([]byte, 14)
	_, _ = v.ReadAt(buf, 4096)
	fmt.Printf("%s, %s, %d devices\n", buf, s.Info().Geometry, len(s.Info().Devices))
	// Output: hello, erasure, 4+2, 6 devices
}

// ParseGeometry reads the --ec flag.
func ExampleParseGeometry() {
	g, err := chunkstore.ParseGeometry("8+3")
	fmt.Println(g.Data, g.Parity, g.Devices(), err)
	_, err = chunkstore.ParseGeometry("8-3")
	fmt.Println(err)
	// Output:
	// 8 3 11 <nil>
	// chunkstore: invalid geometry "8-3": want K+M, for example 4+2 (K data and M parity devices)
}
