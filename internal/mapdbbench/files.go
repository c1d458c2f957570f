package mapdbbench

import (
	"os"
	"path/filepath"
	"strings"
)

// Usage is the disk usage of a replica.
type Usage struct {
	Size  int64 // bytes of all its files
	Files int   // number of files
	WAL   int64 // bytes of pebble's write-ahead logs (*.log), in Size
}

// DirUsage adds up the regular files under dir.
func DirUsage(dir string) (Usage, error) {
	var u Usage
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		u.Size += fi.Size()
		u.Files++
		if strings.HasSuffix(p, ".log") {
			u.WAL += fi.Size()
		}
		return nil
	})
	return u, err
}

// DropCache drops the page cache of every file under dir.
func DropCache(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return dropFile(p)
	})
}
