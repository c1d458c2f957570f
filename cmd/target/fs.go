package main

import (
	"fmt"
	"hash/crc32"
	"log/slog"
	"path/filepath"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
)

// defaultFSName is the file namespace `target serve` adds by default.
const defaultFSName = "files"

// fsHelp is the --fs flag's help.
const fsHelp = "serve a file namespace `NAME` (after the --namespace ones) whose files are erasure-coded " +
	"chunks of the store and whose metadata is replicated on every device of it (a DATA/fs-NAME.db of an " +
	"older version is imported once); on whenever an ec: namespace is served; \"\" turns it off"

// fsID is the FSID of a file namespace, from its name: its chunks in the
// shared store carry it.
func fsID(name string) uint16 {
	sum := crc32.ChecksumIEEE([]byte("capsule fs " + name))
	return uint16(sum) ^ uint16(sum>>16)
}

// openFileNamespace opens (or creates) the file namespace name on store.
// Its metadata is in the store's records; an older version's metadata
// file in dataDir is imported.
func openFileNamespace(name, dataDir string, store *chunkstore.Store, log *slog.Logger) (*server.Server, error) {
	if name == "" || filepath.Base(name) != name {
		return nil, fmt.Errorf("--fs %q: want a plain name such as %q", name, defaultFSName)
	}
	path := filepath.Join(dataDir, "fs-"+name+".db")
	s, err := server.Open(store, server.Options{FSID: fsID(name), Import: path,
		Logger: log.With("fs", name)})
	if err != nil {
		return nil, fmt.Errorf("file namespace %s: %w", name, err)
	}
	st := s.Stats()
	log.Info("file namespace open", "name", name, "inodes", st.Inodes, "bytes", st.UsedBytes)
	return s, nil
}
