package host

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/nvmeof"
)

// The files a host's identity comes from, as nvme-cli and systemd keep
// them.
const (
	// HostNQNFile holds the host NQN on one line (nvme-cli's
	// /etc/nvme/hostnqn, written by `nvme gen-hostnqn`).
	HostNQNFile = "/etc/nvme/hostnqn"
	// HostIDFile holds the Host Identifier as a UUID on one line
	// (nvme-cli's /etc/nvme/hostid).
	HostIDFile = "/etc/nvme/hostid"
	// MachineIDFile is systemd's machine ID (machine-id(5)), from which
	// an identity is derived when the files above are absent.
	MachineIDFile = "/etc/machine-id"
	// dbusMachineIDFile is where older systems keep the same ID.
	dbusMachineIDFile = "/var/lib/dbus/machine-id"
)

// uuidNQNPrefix starts a UUID-form NQN (NVMe Base 4.1, NVMe Qualified
// Names): the prefix and a UUID.
const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// identityNamespace is the name space of the version 5 (SHA-1,
// name-based) UUIDs derived from a machine ID. The derived identity is a
// hash, so it is stable and does not disclose the machine ID, which
// machine-id(5) asks be kept confidential.
var identityNamespace = uuid.MustParse("6d2b1a3e-8c4f-5e0b-9a71-63617073756c")

// Identity is who a host says it is in Fabrics Connect: the host NQN
// (HOSTNQN) and the 128-bit Host Identifier (HOSTID).
type Identity struct {
	NQN string
	ID  [16]byte
	// Source says where NQN came from: a file's path, "random" when the
	// machine has no ID, or "option" for WithHostNQN.
	Source string
}

// IdentityFiles names the files LoadIdentity reads; the zero value of a
// field means that file is not consulted.
type IdentityFiles struct {
	HostNQN    string   // HostNQNFile
	HostID     string   // HostIDFile
	MachineIDs []string // MachineIDFile, then /var/lib/dbus/machine-id
}

// SystemIdentityFiles are the files of this machine.
func SystemIdentityFiles() IdentityFiles {
	return IdentityFiles{HostNQN: HostNQNFile, HostID: HostIDFile, MachineIDs: []string{MachineIDFile, dbusMachineIDFile}}
}

// LoadIdentity works out a host's identity from files, as nvme-cli does:
//
//   - The NQN is the first line of files.HostNQN when that file exists
//     and is not empty; it must be a valid NQN.
//   - The Host Identifier is the UUID in files.HostID when that file
//     exists; else the UUID of a UUID-form NQN from files.HostNQN; else
//     one derived from the machine ID.
//   - Without a host NQN file, the NQN is the UUID form of the derived
//     Host Identifier: "nqn.2014-08.org.nvmexpress:uuid:" and a version 5
//     UUID of the machine ID (the first of files.MachineIDs that exists).
//
// Every process on a machine so gets the same identity. With no host NQN
// file and no machine ID, LoadIdentity returns an error wrapping
// fs.ErrNotExist; a file that exists but cannot be read or holds no valid
// NQN or UUID is an error too.
func LoadIdentity(files IdentityFiles) (Identity, error) {
	var id Identity
	nqn, nqnPath, err := firstLine(files.HostNQN)
	if err != nil {
		return id, err
	}
	if nqn != "" {
		if err := nvmeof.ValidateNQN(nqn); err != nil {
			return id, fmt.Errorf("host NQN in %s: %w", nqnPath, err)
		}
		id.NQN, id.Source = nqn, nqnPath
	}
	hostID, idPath, err := firstLine(files.HostID)
	if err != nil {
		return id, err
	}
	switch {
	case hostID != "":
		u, err := uuid.Parse(hostID)
		if err != nil {
			return id, fmt.Errorf("host ID in %s: %w", idPath, err)
		}
		id.ID = u
	case strings.HasPrefix(nqn, uuidNQNPrefix):
		if u, err := uuid.Parse(nqn[len(uuidNQNPrefix):]); err == nil {
			id.ID = u
			break
		}
		fallthrough
	default:
		u, err := derivedHostID(files.MachineIDs)
		if err != nil {
			if id.NQN == "" {
				return id, err
			}
			// An NQN from a file, nothing to derive the ID from:
			// derive it from the NQN, stable as the file is.
			u = uuid.NewSHA1(identityNamespace, []byte(id.NQN))
		}
		id.ID = u
	}
	if id.NQN == "" {
		id.NQN = uuidNQNPrefix + uuid.UUID(id.ID).String()
		id.Source = "machine ID"
	}
	return id, nil
}

// derivedHostID is the version 5 UUID of the first machine ID found.
func derivedHostID(paths []string) (uuid.UUID, error) {
	for _, p := range paths {
		mid, _, err := firstLine(p)
		if err != nil {
			return uuid.UUID{}, err
		}
		if mid != "" {
			return uuid.NewSHA1(identityNamespace, []byte(mid)), nil
		}
	}
	return uuid.UUID{}, fmt.Errorf("no host NQN file and no machine ID (%s): %w", strings.Join(paths, ", "), fs.ErrNotExist)
}

// firstLine returns the first line of path without surrounding blanks,
// and "" when path is "" or the file does not exist.
func firstLine(path string) (string, string, error) {
	if path == "" {
		return "", "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", path, nil
	}
	if err != nil {
		return "", path, err
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return string(bytes.TrimSpace(line)), path, nil
}

var (
	systemIdentityOnce sync.Once
	systemIdentity     Identity
	systemIdentityErr  error
)

// SystemIdentity is LoadIdentity(SystemIdentityFiles()), read once per
// process: what Dial and Discover present without WithHostNQN and
// WithHostID. On a machine with neither a host NQN file nor a machine ID
// it is a random identity made once per process (Source "random"), so
// every controller of the process at least presents the same one. An
// error means a file exists but is unreadable or invalid.
func SystemIdentity() (Identity, error) {
	systemIdentityOnce.Do(func() {
		systemIdentity, systemIdentityErr = LoadIdentity(SystemIdentityFiles())
		if errors.Is(systemIdentityErr, fs.ErrNotExist) {
			u := uuid.New()
			systemIdentity = Identity{NQN: uuidNQNPrefix + u.String(), ID: u, Source: "random"}
			systemIdentityErr = nil
		}
	})
	return systemIdentity, systemIdentityErr
}
