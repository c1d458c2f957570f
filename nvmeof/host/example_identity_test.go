package host_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/capsule-storage/capsule/nvmeof/host"
)

// A host's identity, worked out from stand-ins for /etc/nvme/hostnqn,
// /etc/nvme/hostid and /etc/machine-id: without the nvme-cli files, the
// NQN is derived from the machine ID, the same on every run.
func ExampleLoadIdentity() {
	etc, err := os.MkdirTemp("", "etc")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(etc)
	if err := os.WriteFile(filepath.Join(etc, "machine-id"), []byte("3d1219c7c4c5404aaa1f6d2a48adfda4\n"), 0o444); err != nil {
		log.Fatal(err)
	}
	files := host.IdentityFiles{
		HostNQN:    filepath.Join(etc, "nvme", "hostnqn"),
		HostID:     filepath.Join(etc, "nvme", "hostid"),
		MachineIDs: []string{filepath.Join(etc, "machine-id")},
	}
	id, err := host.LoadIdentity(files)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id.NQN)
	fmt.Printf("%x\n", id.ID)
	// Output:
	// nqn.2014-08.org.nvmexpress:uuid:2141a003-b86e-522f-b664-20fd92c78253
	// 2141a003b86e522fb66420fd92c78253
}
