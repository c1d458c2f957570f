package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	// The progress bar: github.com/schollz/progressbar/v3. It is kept up,
	// pure Go, writes to any io.Writer, and with a known total it renders
	// only when told to (no goroutine of its own). We decide ourselves
	// whether the writer is a terminal (golang.org/x/term, which it already
	// depends on) and print plain lines when it is not.
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/capsule-storage/capsule/chunkstore"
)

func repairCommand() *cli.Command {
	return &cli.Command{
		Name:      "repair",
		Usage:     "rebuild a lost device of an erasure-coded store onto a new, empty directory",
		UsageText: "target repair --data DIR --device NEWDIR [--position N] [--ec K+M] [--rate BYTES/s]",
		Description: "Repair fills NEWDIR with the shards the lost device held, reconstructed from\n" +
			"the others, and makes it a member of the store in the lost device's place.\n" +
			"NEWDIR must be new or empty (a file system's lost+found is fine); it is created\n" +
			"if needed. Stop `target serve` first: a store is opened by one process at a time.\n" +
			"\n" +
			"The store is on DATA/dev0 … DATA/dev{K+M-1}, K+M being the store's own geometry\n" +
			"as its devices record it; --ec, when given, must match it (else exit 2).\n" +
			"\n" +
			"Which device NEWDIR replaces:\n" +
			"  1. --position N, if given (0 … K+M-1);\n" +
			"  2. otherwise N, when NEWDIR is DATA/devN itself (a new disk mounted where\n" +
			"     the old one was);\n" +
			"  3. otherwise the one device of DATA/dev0 … DATA/dev{K+M-1} the store cannot\n" +
			"     use (gone, empty, failed, replaced, or a rebuild in progress), as the\n" +
			"     devices' identity records tell. With several, say which with --position.\n" +
			"When NEWDIR is not DATA/devN, later commands given --data still look for\n" +
			"DATA/devN: mount the new disk there, or make it a symlink (ln -s NEWDIR DATA/devN).\n" +
			"\n" +
			"Repair is resumable: it saves its progress as it goes, so after Ctrl-C, a crash\n" +
			"or a reboot, run the same command again and it continues where it stopped.\n" +
			"Progress is a bar on a terminal and a line every 5 % (or 30 s) otherwise.\n" +
			"\n" +
			"The last line on stdout is a summary for scripts:\n" +
			"  repair: device=N stripes=N rebuilt=N skipped=N unrecoverable=N bytes=N complete=true\n" +
			"rebuilt stripes got their shard on NEWDIR; skipped ones needed none (written\n" +
			"after the rebuild began, or done before a resume); unrecoverable ones have\n" +
			"fewer than K good shards on the other devices: that data is lost.\n" +
			"\n" +
			"Exit status: 0 rebuilt; 1 the repair could not run or was interrupted (run it\n" +
			"again to resume); 2 bad flags; 3 some stripe is unrecoverable.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Usage: "the store's data directory `DIR`, holding dev0, dev1, …"},
			&cli.StringFlag{Name: "device", Usage: "the new, empty directory (`NEWDIR`) standing in for the lost device"},
			&cli.IntFlag{Name: "position", Usage: "the lost device's position `N`, as in DATA/devN",
				DefaultText: "NEWDIR's own position, or the one device the store cannot use"},
			&cli.StringFlag{Name: "ec", DefaultText: "the store's, from its devices",
				Usage: "the store's geometry `K+M`: K data and M parity devices; when given, it must be the store's"},
			&cli.StringFlag{Name: "rate", Value: "0", Usage: "limit reads to `BYTES` per second, e.g. 50MiB or 200MB", DefaultText: "0, no limit"},
		},
		Action: runRepair,
	}
}

func runRepair(c *cli.Context) error {
	data, device := c.String("data"), c.String("device")
	if strings.TrimSpace(data) == "" {
		return usageError("--data DIR is required: the store's data directory, holding dev0, dev1, …")
	}
	if strings.TrimSpace(device) == "" {
		return usageError("--device NEWDIR is required: the new, empty directory that takes the lost device's place")
	}
	// Without --ec the store's own geometry says how many DATA/devN there
	// are, as for scrub: dataDevices is a first guess, probeStore the answer.
	l := storeLayout{dirs: dataDevices(data), data: data}
	if c.IsSet("ec") {
		g, err := parseGeometryFlag(c)
		if err != nil {
			return err
		}
		l = storeLayout{dirs: chunkstore.DeviceDirs(data, g), geo: g, geoSet: true}
	}
	rate, err := parseRateFlag(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("repair takes no arguments, got %q", c.Args().Slice())
	}
	pos := -1
	if c.IsSet("position") {
		pos = c.Int("position")
		if pos < 0 {
			return usageError("bad --position %d: devices are numbered from 0, as in DATA/dev0", pos)
		}
		if l.geoSet && pos >= l.geo.Devices() {
			return usageError("bad --position %d: a %s store has devices 0 to %d", pos, l.geo, l.geo.Devices()-1)
		}
		if err := checkNotOtherDevice(l.dirs, device, pos); err != nil {
			return err
		}
	}
	if err := checkReplacement(device); err != nil {
		return err
	}
	if pos < 0 {
		for i, d := range l.dirs {
			if sameDir(device, d) {
				pos = i
			}
		}
	}
	if pos < 0 || !l.geoSet {
		p, err := probeStore(l)
		if err != nil {
			return err
		}
		l.dirs = p.dirs
		if pos < 0 {
			if pos, err = p.replaced(device); err != nil {
				return err
			}
		}
		if pos >= len(l.dirs) && c.IsSet("position") {
			return usageError("bad --position %d: the store has devices 0 to %d", pos, len(l.dirs)-1)
		}
		if pos >= len(l.dirs) {
			return usageError("repair: --device %s is device %d's directory, but the store has devices 0 to %d", device, pos, len(l.dirs)-1)
		}
		if err := checkNotOtherDevice(l.dirs, device, pos); err != nil {
			return err
		}
	}

	dirs := slices.Clone(l.dirs)
	dirs[pos] = device
	s, err := openStore(l, dirs)
	if err != nil {
		return err
	}
	defer s.Close() // for the early return; Close is idempotent
	info := s.Info().Devices[pos]
	switch info.State {
	case chunkstore.DeviceHealthy:
		return fmt.Errorf("repair: device %d (%s) is a healthy member of the store: nothing to rebuild. "+
			"repair wants a new, empty directory in place of a lost device; `target scrub` checks and fixes shards", pos, device)
	case chunkstore.DeviceRebuilding:
		fmt.Fprintf(c.App.ErrWriter, "repair: resuming the rebuild of device %d in %s\n", pos, device)
	default:
		fmt.Fprintf(c.App.ErrWriter, "repair: rebuilding device %d in %s\n", pos, device)
	}
	for _, d := range s.Info().Devices {
		if d.Pos != pos && d.State != chunkstore.DeviceHealthy {
			fmt.Fprintf(c.App.ErrWriter, "repair: device %d (%s) is %s too; rebuild it next\n", d.Pos, d.Name, d.State)
		}
	}

	progress := newProgressDisplay(c.App.ErrWriter, fmt.Sprintf("repair: device %d", pos))
	rep, rebuildErr := s.Rebuild(c.Context, pos, chunkstore.RebuildOptions{BytesPerSecond: rate, Progress: progress.update})
	progress.finish()
	closeErr := s.Close()

	fmt.Fprintf(c.App.Writer, "repair: device=%d stripes=%d rebuilt=%d skipped=%d unrecoverable=%d bytes=%d complete=%t\n",
		pos, rep.Stripes, rep.Rebuilt, rep.Skipped, rep.Unrecoverable, rep.Bytes, rebuildErr == nil)
	if rebuildErr != nil {
		if c.Context.Err() != nil {
			return &lineError{msg: "repair interrupted; its progress is saved: run the same command again to resume: " + storeError(rebuildErr), err: rebuildErr}
		}
		return &lineError{msg: fmt.Sprintf("repair of device %d: %s (run the same command again to resume once the cause is fixed)", pos, storeError(rebuildErr)), err: rebuildErr}
	}
	if closeErr != nil {
		return &lineError{msg: "repair: closing the store: " + storeError(closeErr), err: closeErr}
	}
	if !sameDir(device, l.dirs[pos]) {
		fmt.Fprintf(c.App.ErrWriter, "repair: device %d is now %s, but commands given --data look for %s: "+
			"mount the disk there, or link it: ln -s %s %s (scrub also takes every device with --device)\n",
			pos, device, l.dirs[pos], device, l.dirs[pos])
	}
	if rep.Unrecoverable > 0 {
		return cli.Exit(fmt.Sprintf("repair: %s unrecoverable: fewer than K good shards were left on the other devices",
			stripes(rep.Unrecoverable, "stripe is", "stripes are")), exitUnrecoverable)
	}
	return nil
}

// checkNotOtherDevice refuses a NEWDIR that is another device's
// directory than the one at pos.
func checkNotOtherDevice(dirs []string, device string, pos int) error {
	for i, d := range dirs {
		if i != pos && sameDir(device, d) {
			return usageError("repair: --device %s is device %d's directory, not device %d's", device, i, pos)
		}
	}
	return nil
}

// storeProbe is what repair learns from opening the store before it
// rebuilds: the devices' directories and the devices it cannot use.
type storeProbe struct {
	dirs     []string // one per device of the store
	unusable []int    // positions the store cannot use
	err      error    // why the store did not open, if it did not
}

// probeStore opens the store on l.dirs (with --data and no --ec, on as
// many DATA/devN as the store has) and closes it again. A store that
// does not open because of its devices still tells which they are: Open
// checks their number before it looks at each.
func probeStore(l storeLayout) (storeProbe, error) {
	s, dirs, err := openStoreDirs(l, l.dirs)
	p := storeProbe{dirs: dirs}
	var de *chunkstore.DevicesError
	switch {
	case err == nil:
		for _, d := range s.Info().Devices {
			if d.State != chunkstore.DeviceHealthy {
				p.unusable = append(p.unusable, d.Pos)
			}
		}
		if err := s.Close(); err != nil {
			return p, &lineError{msg: "open store: closing it again: " + storeError(err), err: err}
		}
	case errors.As(err, &de) && !errors.Is(err, chunkstore.ErrDeviceBusy) && !errors.Is(err, chunkstore.ErrNoStore):
		for _, d := range de.Devices {
			if !slices.Contains(p.unusable, d.Pos) {
				p.unusable = append(p.unusable, d.Pos)
			}
		}
		p.err = err
	default:
		return p, err
	}
	return p, nil
}

// replaced is the device NEWDIR replaces when neither --position nor its
// path says: the one device the store cannot use.
func (p storeProbe) replaced(device string) (int, error) {
	switch {
	case len(p.unusable) == 1:
		return p.unusable[0], nil
	case p.err != nil:
		return 0, p.err
	case len(p.unusable) == 0:
		return 0, fmt.Errorf("repair: every device of the store (%s) is healthy: nothing to rebuild", strings.Join(p.dirs, ", "))
	}
	return 0, usageError("repair: devices %v cannot be used; say which one %s replaces with --position N (and rebuild the others after it)", p.unusable, device)
}

// sameDir reports whether a and b name the same directory: the same
// file when both exist, the same absolute path otherwise.
func sameDir(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	pa, errA := filepath.Abs(a)
	pb, errB := filepath.Abs(b)
	return errA == nil && errB == nil && pa == pb
}

// deviceFiles are the names a device directory holds
// (chunkstore.DeviceFiles), and what a fresh file system puts in its root.
var deviceFiles = append(chunkstore.DeviceFiles(), "lost+found")

// checkReplacement refuses a directory that holds anything but a device's
// own files, so a mistyped --device does not turn a directory of other
// files into a device. A directory with an identity record is left to the
// store: it is a rebuild to resume, or refused as foreign.
func checkReplacement(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("repair: --device %s: %w", dir, err)
	}
	var other []string
	for _, e := range ents {
		if !slices.Contains(deviceFiles, e.Name()) {
			other = append(other, e.Name())
		}
	}
	if len(other) > 0 {
		if len(other) > 5 {
			other = append(other[:5], "…")
		}
		return usageError("repair: --device %s is not empty (it holds %s): give a new or emptied directory; repair makes it a device of the store",
			dir, strings.Join(other, ", "))
	}
	return nil
}

// progressDisplay shows how far a scrub or rebuild has come on w: a bar
// when w is a terminal, otherwise a plain line every 5 % or 30 s, so logs
// and pipes stay readable.
type progressDisplay struct {
	w     io.Writer
	label string // "repair: device 2"
	units string // what Progress counts: "stripes" unless set
	tty   bool
	// fullWidth: the terminal says how wide it is, and the bar fills it.
	fullWidth bool

	bar      *progressbar.ProgressBar // on a terminal, from the first update
	lastPct  int64                    // percent of the last line, -1 before it
	lastLine time.Time
}

func newProgressDisplay(w io.Writer, label string) *progressDisplay {
	d := &progressDisplay{w: w, label: label, units: "stripes", lastPct: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		d.tty = true
		// A terminal that does not say its width (a pty of script(1) or
		// of a CI runner: 0 columns) gets a bar of a fixed width; the
		// full width of a 0-column terminal is no bar at all.
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols >= 60 {
			d.fullWidth = true
		}
	}
	return d
}

// update is a chunkstore Progress callback.
func (d *progressDisplay) update(p chunkstore.Progress) {
	if p.Stripes <= 0 {
		return
	}
	if d.tty {
		if d.bar == nil {
			d.bar = progressbar.NewOptions64(p.Stripes,
				progressbar.OptionSetWriter(d.w),
				progressbar.OptionSetDescription(d.label),
				progressbar.OptionSetItsString(d.units),
				progressbar.OptionShowCount(),
				progressbar.OptionShowIts(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionThrottle(100*time.Millisecond),
				d.widthOption(),
			)
		}
		_ = d.bar.Set64(p.Done)
		return
	}
	pct := p.Done * 100 / p.Stripes
	due := d.lastPct < 0 || pct >= d.lastPct+5 ||
		(pct > d.lastPct && time.Since(d.lastLine) >= 30*time.Second) ||
		(p.Done >= p.Stripes && pct != d.lastPct)
	if due {
		d.line(p, pct)
	}
}

// widthOption is the bar's width: the terminal's, or 30 characters.
func (d *progressDisplay) widthOption() progressbar.Option {
	if d.fullWidth {
		return progressbar.OptionFullWidth()
	}
	return progressbar.OptionSetWidth(30)
}

func (d *progressDisplay) line(p chunkstore.Progress, pct int64) {
	fmt.Fprintf(d.w, "%s: %d/%d %s (%d%%), %s read\n", d.label, p.Done, p.Stripes, d.units, pct, formatBytes(p.Bytes))
	d.lastPct, d.lastLine = pct, time.Now()
}

// finish ends the bar's line (the last state stays on screen).
func (d *progressDisplay) finish() {
	if d.bar != nil {
		fmt.Fprintln(d.w)
	}
}

// formatBytes writes n in binary units: 512 B, 1.5 MiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
