package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
)

// formatV1Error is the one line a command prints for a store that a
// release before the log-structured store wrote.
func formatV1Error(data string) error {
	return cli.Exit(fmt.Sprintf("the erasure-coded store in %s is format v1 (written before capsule's log-structured store); convert it with `target migrate --data %s`", data, data), 1)
}

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "convert an erasure-coded store of format v1 to format v2, in place or into a new directory",
		UsageText: "target migrate --data DIR [--into NEWDIR] [--ec K+M]",
		Description: "Format v2 writes through a log of full stripes; format v1 rewrote a stripe\n" +
			"for every write. This build refuses a v1 store until it is converted.\n" +
			"\n" +
			"The conversion keeps every stripe where it is and rewrites only the metadata:\n" +
			"each device's replica of the block map becomes slot records and map pages, in\n" +
			"one transaction per device, then each device's identity record says v2. It\n" +
			"takes seconds, whatever the store holds. The store must not be open: stop\n" +
			"`target serve` first.\n" +
			"\n" +
			"With --into NEWDIR, DATA is first copied to NEWDIR (every file, the store's\n" +
			"devices and the file service's metadata alike) and the copy is converted; DATA\n" +
			"stays as it was, for a v1 build to keep using.\n" +
			"\n" +
			"Migrate is resumable: after a crash or Ctrl-C, run the same command again and\n" +
			"it finishes (a copy continues with the files not yet copied whole).\n" +
			"Progress is a bar on a terminal and a line every 5 % otherwise.\n" +
			"\n" +
			"The last line on stdout is a summary for scripts:\n" +
			"  migrate: format=2 volumes=N chunks=N stripes=N converted=true|false\n" +
			"converted=false means the store was v2 already (or an earlier run had\n" +
			"converted its metadata and this one finished the identity records).\n" +
			"\n" +
			"Exit status: 0 the store is v2; 1 the conversion could not run or was\n" +
			"interrupted (run it again); 2 bad flags.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Usage: "the store's data directory `DIR`, holding dev0, dev1, …"},
			&cli.StringFlag{Name: "into", Usage: "copy DATA to `NEWDIR` and convert the copy, leaving DATA as it is"},
			&cli.StringFlag{Name: "ec", Value: chunkstore.DefaultGeometry.String(),
				Usage: "the store's geometry `K+M`: K data and M parity devices; it sets how many DATA/devN there are"},
		},
		Action: runMigrate,
	}
}

func runMigrate(c *cli.Context) error {
	data := c.String("data")
	if strings.TrimSpace(data) == "" {
		return usageError("--data DIR is required: the store's data directory, holding dev0, dev1, …")
	}
	if c.NArg() > 0 {
		return usageError("migrate takes no arguments, got %q", c.Args().Slice())
	}
	g, err := parseGeometryFlag(c)
	if err != nil {
		return err
	}
	w := c.App.Writer
	target := data
	if into := c.String("into"); into != "" {
		if sameDir(into, data) {
			return usageError("--into %s is --data itself; leave --into out to convert in place", into)
		}
		if err := copyTree(w, data, into); err != nil {
			return fmt.Errorf("migrate: copy %s to %s: %w", data, into, err)
		}
		target = into
	}
	progress := newProgressDisplay(w, "migrate")
	progress.units = "steps"
	rep, err := chunkstore.MigrateDirs(chunkstore.DeviceDirs(target, g), chunkstore.MigrateOptions{Progress: progress.update})
	progress.finish()
	if err != nil {
		if errors.Is(err, chunkstore.ErrDeviceBusy) {
			return &lineError{msg: "migrate: " + storeError(err) + "; another process has the store open, most likely a running `target serve`: stop it first", err: err}
		}
		return &lineError{msg: "migrate: " + storeError(err), err: err}
	}
	fmt.Fprintf(w, "the store in %s is format v2\n", target)
	fmt.Fprintf(w, "migrate: format=2 volumes=%d chunks=%d stripes=%d converted=%t\n",
		rep.Volumes, rep.Chunks, rep.Stripes, rep.Converted)
	return nil
}

// copyTree copies every regular file under src to the same path under
// dst, each through a temporary file that is synced and renamed, so that
// a file present under its name is whole. A file already there with the
// same size is taken as copied (a resumed run).
func copyTree(w io.Writer, src, dst string) error {
	var files []string
	var total int64
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, p)
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		return err
	}
	progress := newProgressDisplay(w, "migrate: copy")
	progress.units = "bytes"
	var done int64
	for _, p := range files {
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		n, err := copyFile(p, filepath.Join(dst, rel))
		if err != nil {
			return err
		}
		done += n
		progress.update(chunkstore.Progress{Stripes: total, Done: done, Bytes: done})
	}
	progress.finish()
	return nil
}

func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, err
	}
	if have, err := os.Stat(dst); err == nil && have.Size() == st.Size() {
		return st.Size(), nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	tmp := dst + ".migrate-tmp"
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err == nil {
		err = syncDir(filepath.Dir(dst))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return 0, err
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
