package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
)

// Exit statuses of scrub and repair (a plain error exits 1 through main).
const (
	exitUsage         = 2 // bad flags: nothing was opened or written
	exitUnrecoverable = 3 // some stripes cannot be reconstructed: data is lost
)

func scrubCommand() *cli.Command {
	return &cli.Command{
		Name:  "scrub",
		Usage: "verify every shard of an erasure-coded store and repair what can be repaired",
		UsageText: "target scrub --data DIR [--rate BYTES/s] [--no-repair]\n" +
			"target scrub --device DIR --device DIR ... [--ec K+M] [--rate BYTES/s] [--no-repair]",
		Description: "Scrub reads every shard of every stripe, checks its header and its CRC32C\n" +
			"sector checksums, and checks data against parity. A bad shard is rewritten in\n" +
			"place from the others; the repairs are on disk when scrub returns.\n" +
			"\n" +
			"The store is on DATA/dev0 … DATA/dev{K+M-1}, K+M being the store's own geometry\n" +
			"as its devices record it (--ec, when given, must match it), or on the directories\n" +
			"--device names, every one of them, in order. A store is\n" +
			"opened by one process at a time: while `target serve` runs, it scrubs the store\n" +
			"itself (--scrub-rate; SIGUSR1 starts a full pass, the results are in its log),\n" +
			"and this command says so and exits 1. Stop serve first to scrub from here.\n" +
			"A missing device does not stop the scrub (up to M may be missing); its shards\n" +
			"are counted as degraded. Replace it and run `target repair`.\n" +
			"\n" +
			"The last line on stdout is a summary for scripts:\n" +
			"  scrub: checked=N damaged=N repaired=N unrecoverable=N degraded=N shards_repaired=N bytes=N complete=true\n" +
			"checked stripes were read whole; damaged ones had a missing, unreadable,\n" +
			"corrupt or stale shard, and are either repaired (every bad shard rewritten),\n" +
			"degraded (a bad shard is on a missing device: `target repair` fixes it) or\n" +
			"unrecoverable (fewer than K good shards: that data is lost and reads of it\n" +
			"fail). Lines before it name each damaged stripe (the first 100).\n" +
			"complete=false means the scrub was interrupted; the repairs made so far stay.\n" +
			"\n" +
			"Exit status: 0 nothing unrecoverable; 1 the scrub could not run or was\n" +
			"interrupted; 2 bad flags; 3 some stripe is unrecoverable.",
		Flags: append(storeFlags(
			"a device `DIR`, once per device in order, in place of DATA/dev0 … DATA/dev{K+M-1}",
			"the store's, from its devices"),
			&cli.StringFlag{Name: "rate", Value: "0", Usage: "limit reads to `BYTES` per second, e.g. 50MiB or 200MB", DefaultText: "0, no limit"},
			&cli.BoolFlag{Name: "no-repair", Usage: "only report; write nothing"},
		),
		Action: runScrub,
	}
}

// storeFlags are the flags that say where a store is. deviceUsage
// describes --device, whose meaning differs between scrub and repair.
func storeFlags(deviceUsage, ecDefault string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "data", Usage: "the store's data directory `DIR`, holding dev0, dev1, …"},
		&cli.StringSliceFlag{Name: "device", Usage: deviceUsage},
		&cli.StringFlag{Name: "ec", Value: chunkstore.DefaultGeometry.String(), DefaultText: ecDefault,
			Usage: "the store's geometry `K+M`: K data and M parity devices; it sets how many DATA/devN there are"},
	}
}

// storeLayout is where a command finds a store.
type storeLayout struct {
	dirs   []string            // one per device, in order
	geo    chunkstore.Geometry // --ec, or the default
	geoSet bool                // --ec was given: Open checks it against the store
	data   string              // --data without --ec: openStore takes the geometry from the store
}

// dataDevices are the device directories of the store in data when no
// --ec says its geometry: DATA/dev0 … DATA/devN for the highest devN
// there (the default geometry's when there is none). Open reads the
// geometry from the devices' identity records and checks their number;
// openStore retries with the store's count when trailing devices are gone.
func dataDevices(data string) []string {
	ents, _ := os.ReadDir(data)
	n := 0
	for _, e := range ents {
		if num, ok := strings.CutPrefix(e.Name(), "dev"); ok {
			if i, err := strconv.Atoi(num); err == nil && i >= 0 && i < 256 && strconv.Itoa(i) == num && i+1 > n {
				n = i + 1
			}
		}
	}
	if n < 2 {
		return chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	}
	return deviceDirsN(data, n)
}

func deviceDirsN(data string, n int) []string {
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = filepath.Join(data, fmt.Sprintf("dev%d", i))
	}
	return dirs
}

// storeGeometry reads "the store is K+M on N devices" from Open's
// refusal of the wrong number of devices.
var storeGeometry = regexp.MustCompile(`the store is (\d+\+\d+) on (\d+) devices`)

// storeGeometryIs reads the store's geometry from Open's refusal of
// another (ErrGeometryMismatch: "the store is K+M, K'+M' asked").
var storeGeometryIs = regexp.MustCompile(`the store is (\d+\+\d+), `)

// usageError is a bad flag: exit status 2, before anything is opened.
func usageError(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}

// parseGeometryFlag reads --ec.
func parseGeometryFlag(c *cli.Context) (chunkstore.Geometry, error) {
	g, err := chunkstore.ParseGeometry(c.String("ec"))
	if err != nil {
		return g, usageError("bad --ec: %v", err)
	}
	return g, nil
}

// parseRateFlag reads --rate: a size as parseSize takes it, optionally
// followed by "/s".
func parseRateFlag(c *cli.Context) (int64, error) {
	s := strings.TrimSpace(c.String("rate"))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "/S")
	n, err := parseSize(s)
	if err != nil {
		return 0, usageError("bad --rate: %v (for example 50MiB for 50 MiB/s, 0 for no limit)", err)
	}
	return n, nil
}

// parseStoreLayout reads --data, --device (every device) and --ec.
func parseStoreLayout(c *cli.Context) (storeLayout, error) {
	g, err := parseGeometryFlag(c)
	if err != nil {
		return storeLayout{}, err
	}
	l := storeLayout{geo: g, geoSet: c.IsSet("ec")}
	devs := c.StringSlice("device")
	data := c.String("data")
	switch {
	case len(devs) > 0:
		for _, d := range devs {
			if strings.TrimSpace(d) == "" {
				return l, usageError("--device needs a directory")
			}
		}
		if l.geoSet && len(devs) != g.Devices() {
			return l, usageError("--ec %s needs %d --device directories, %d given", g, g.Devices(), len(devs))
		}
		l.dirs = devs
	case data != "" && l.geoSet:
		l.dirs = chunkstore.DeviceDirs(data, g)
	case data != "":
		l.dirs, l.data = dataDevices(data), data
	default:
		return l, usageError("say where the store is: --data DIR (devices DIR/dev0 … DIR/dev{K+M-1}), or --device DIR once per device")
	}
	return l, nil
}

// openStore opens the store on dirs, never creating one, and explains the
// errors an operator can act on.
func openStore(l storeLayout, dirs []string) (*chunkstore.Store, error) {
	s, _, err := openStoreDirs(l, dirs)
	return s, err
}

// openStoreDirs is openStore, and returns the directories it opened or
// last tried: dirs, or with --data and no --ec, DATA/dev0 … for as many
// devices as the store's identity records say it has.
func openStoreDirs(l storeLayout, dirs []string) (*chunkstore.Store, []string, error) {
	opts := []chunkstore.Option{chunkstore.WithLogger(slog.Default())}
	if l.geoSet {
		opts = append(opts, chunkstore.WithGeometry(l.geo))
	}
	s, err := chunkstore.OpenDirs(dirs, opts...)
	if l.data != "" && errors.Is(err, chunkstore.ErrInvalidArgument) {
		if m := storeGeometry.FindStringSubmatch(err.Error()); m != nil {
			if n, aerr := strconv.Atoi(m[2]); aerr == nil && n != len(dirs) && n < 256 {
				dirs = deviceDirsN(l.data, n)
				s, err = chunkstore.OpenDirs(dirs, opts...)
			}
		}
	}
	if err == nil {
		return s, dirs, nil
	}
	return nil, dirs, explainOpenError(l, dirs, err)
}

// explainOpenError is the one line of a store that did not open.
func explainOpenError(l storeLayout, dirs []string, err error) error {
	if errors.Is(err, chunkstore.ErrFormatV1) {
		return formatV1Error(filepath.Dir(dirs[0]))
	}
	if l.geoSet && errors.Is(err, chunkstore.ErrGeometryMismatch) {
		// Open read the devices' identity records and stopped: a bad
		// flag, found against the store, with nothing opened or written.
		why := storeError(err)
		if m := storeGeometryIs.FindStringSubmatch(why); m != nil {
			why = "the store is " + m[1]
		}
		return &misuseError{lineError{msg: fmt.Sprintf("--ec %s: %s; --ec must be the store's geometry (leave it out to take the store's own)", l.geo, why), err: err}}
	}
	var hint string
	switch {
	case errors.Is(err, chunkstore.ErrDeviceBusy):
		hint = "another process has the store open, most likely a running `target serve`. It scrubs the store " +
			"itself: in the background at its --scrub-rate, repairing what it finds and logging each pass; " +
			"`kill -USR1 PID` makes it start a full pass now. To scrub from here instead, stop `target serve` " +
			"(SIGTERM syncs and closes the store) and run this again"
	case errors.Is(err, chunkstore.ErrNoStore):
		hint = "is --data (or --device) right? (" + strings.Join(dirs, ", ") + ")"
	case errors.Is(err, chunkstore.ErrGeometryMismatch), errors.Is(err, chunkstore.ErrInvalidArgument):
		hint = "--ec must be the store's geometry (leave it out to take the store's own), and --device, when given, must name every device"
	case errors.Is(err, chunkstore.ErrDeviceSwapped):
		hint = "give the devices in the order the store was created with"
	case errors.Is(err, chunkstore.ErrForeignDevice):
		hint = "a device belongs to another store or was replaced; leave it out of the list (or empty it and run `target repair`)"
	case errors.Is(err, chunkstore.ErrTooManyFailures):
		hint = "more devices are missing than the parity covers; bring them back before scrubbing"
	}
	msg := "open store: " + storeError(err)
	if hint != "" {
		msg += "; " + hint
	}
	return &lineError{msg: msg, err: err}
}

// reportDevices warns on w about every device the store cannot use and
// returns their positions.
func reportDevices(w io.Writer, cmd string, s *chunkstore.Store) []int {
	var unusable []int
	for _, d := range s.Info().Devices {
		if d.State == chunkstore.DeviceHealthy {
			continue
		}
		unusable = append(unusable, d.Pos)
		msg := fmt.Sprintf("%s: device %d (%s) is %s", cmd, d.Pos, d.Name, d.State)
		if d.Err != nil {
			msg += ": " + d.Err.Error()
		}
		fmt.Fprintln(w, msg)
	}
	return unusable
}

func runScrub(c *cli.Context) error {
	l, err := parseStoreLayout(c)
	if err != nil {
		return err
	}
	rate, err := parseRateFlag(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return usageError("scrub takes no arguments, got %q", c.Args().Slice())
	}
	s, err := openStore(l, l.dirs)
	if err != nil {
		return err
	}
	unusable := reportDevices(c.App.ErrWriter, "scrub", s)

	progress := newProgressDisplay(c.App.ErrWriter, "scrub")
	rep, scrubErr := s.Scrub(c.Context, chunkstore.ScrubOptions{
		BytesPerSecond: rate,
		NoRepair:       c.Bool("no-repair"),
		Progress:       progress.update,
	})
	progress.finish()
	closeErr := s.Close()

	out := c.App.Writer
	var listed int64
	for _, p := range rep.Problems {
		// With a device missing every stripe is damaged; list the others.
		if p.Err == nil && onlyOn(p.Devices, unusable) {
			continue
		}
		fmt.Fprintln(out, describeProblem(p))
		listed++
	}
	if more := rep.Damaged - listed; more > 0 {
		why := "only the first 100 are kept"
		if len(unusable) > 0 {
			why = "stripes whose only bad shards are on the unusable devices, and past the first 100"
		}
		fmt.Fprintf(out, "scrub: %s not listed (%s)\n", stripes(more, "more damaged stripe"), why)
	}
	fmt.Fprintf(out, "scrub: checked=%d damaged=%d repaired=%d unrecoverable=%d degraded=%d shards_repaired=%d bytes=%d complete=%t\n",
		rep.Checked, rep.Damaged, rep.Repaired, rep.Unrecoverable, rep.Degraded, rep.ShardsRepaired, rep.Bytes, scrubErr == nil)
	if rep.Degraded > 0 {
		fmt.Fprintf(c.App.ErrWriter, "scrub: %s shards on devices the store cannot use; replace the device and run `target repair`\n", stripes(rep.Degraded, "stripe has", "stripes have"))
	}

	switch {
	case rep.Unrecoverable > 0:
		msg := fmt.Sprintf("scrub: %s unrecoverable: fewer than K shards are good, and reads fail", stripes(rep.Unrecoverable, "stripe is", "stripes are"))
		if scrubErr != nil {
			msg += fmt.Sprintf(" (and the scrub stopped early: %v)", scrubErr)
		}
		return cli.Exit(msg, exitUnrecoverable)
	case scrubErr != nil:
		return &lineError{msg: fmt.Sprintf("scrub stopped after %d stripes (the repairs made so far are on disk; run it again to check the rest): %s",
			rep.Checked, storeError(scrubErr)), err: scrubErr}
	case closeErr != nil:
		return &lineError{msg: "scrub: closing the store: " + storeError(closeErr), err: closeErr}
	}
	return nil
}

// onlyOn reports whether every device of devs is in set (and there is one).
func onlyOn(devs, set []int) bool {
	for _, d := range devs {
		if !slices.Contains(set, d) {
			return false
		}
	}
	return len(devs) > 0
}

// describeProblem is one line about a damaged stripe.
func describeProblem(p chunkstore.StripeProblem) string {
	what := fmt.Sprintf("chunk %s stripe %d", p.Chunk, p.Index)
	switch {
	case p.Mixed:
		what = fmt.Sprintf("slot %d (a log stripe of several volumes and chunks)", p.Slot)
	case p.Volume != "":
		what = fmt.Sprintf("volume %q stripe %d", p.Volume, p.Index)
	}
	s := fmt.Sprintf("damaged: %s, bad shards on devices %v", what, slices.Sorted(slices.Values(p.Devices)))
	if p.Err != nil {
		s += ": unrecoverable: " + p.Err.Error()
	}
	return s
}

// stripes writes n with the singular or plural noun: stripes(1, "stripe
// is", "stripes are"); with one form, the plural adds an s.
func stripes(n int64, forms ...string) string {
	one, many := forms[0], forms[0]+"s"
	if len(forms) > 1 {
		many = forms[1]
	}
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}
