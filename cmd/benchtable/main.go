package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// result holds every sample of one benchmark, by unit ("ns/op", "MB/s",
// "allocs/op", …).
type result map[string][]float64

// median of the samples of unit, and whether there were any.
func (r result) median(unit string) (float64, bool) {
	s := slices.Clone(r[unit])
	if len(s) == 0 {
		return 0, false
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// procSuffix is the -GOMAXPROCS suffix of a benchmark name.
var procSuffix = regexp.MustCompile(`-\d+$`)

// parse reads benchmark result lines, keyed by name without the
// "Benchmark" prefix and the GOMAXPROCS suffix: "Transfer/shm-write/1MiB".
func parse(r io.Reader) (map[string]result, error) {
	out := map[string]result{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Name, iterations, then value-unit pairs.
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(strings.TrimPrefix(f[0], "Benchmark"), "")
		res := out[name]
		if res == nil {
			res = result{}
			out[name] = res
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res[f[i+1]] = append(res[f[i+1]], v)
		}
	}
	return out, sc.Err()
}

// A comparison is one line of the table: a benchmark against its baseline.
type comparison struct {
	name, base string // benchmarks as parse keys them; base "" for a row with no baseline
	// label and baseLabel name the row and its baseline in the table
	// when name and base alone do not (one benchmark reporting several
	// metrics): "R3/shm-IOPS".
	label, baseLabel string
	unit             string // "MB/s", "IOPS", …: higher is better; "ns/op" and "-ns" metrics: lower is better
	baseUnit         string // the baseline's unit, when not unit
	id               string // the bar's id in shared/PERFORMANCE.md
	// One kind of bar at most:
	bar      float64 // the ratio to reach (at least), 0 for none
	limitNS  float64 // R4: the most value may add to its baseline (or be, with no baseline), in ns
	noAllocs bool    // R8: allocs/op must be 0
	// atMost is the most value may be (with no baseline: a ratio the
	// script measured, such as a write amplification) or value over the
	// baseline (cost rows). R7′.
	atMost float64
	// cost shows the ratio as value over baseline, "3.20×": how many
	// times the baseline's time or CPU the benchmark takes, the multiple
	// an atMost bar bounds.
	cost bool
	goal float64 // a goal beyond the bar, shown beside it, not judged
	// decimals is the digits after the point of value and baseline.
	decimals int
}

// lowerIsBetter tells whether unit is a time (or a CPU time per I/O).
func lowerIsBetter(unit string) bool {
	return unit == "ns/op" || strings.HasSuffix(unit, "-ns") || strings.HasSuffix(unit, "µs/IO")
}

// Block cases and paths of the fio runs of scripts/bench.sh, each
// against fio on nbdkit's memory plugin run the same way.
var (
	blockCases = []string{"randread-4KiB", "randwrite-4KiB", "seqread-1MiB", "seqwrite-1MiB"}
	blockPaths = []string{"capsule-shm-mem", "capsule-iwarp-mem", "capsule-shm-ec", "capsule-iwarp-ec"}
	// r5Cases carry bar R5.
	r5Cases = map[string]bool{"randread-4KiB": true, "seqread-1MiB": true}
	// enginePaths are fio with capsule's in-process ioengine
	// (bin/fio-capsule.so) on the memory namespace: R5′, one hop against
	// nbdkit's one hop. r5pBars are its bars over shm (goal 1.2).
	enginePaths = []string{"engine-shm-mem", "engine-iwarp-mem"}
	r5pBars     = map[string]float64{"randread-4KiB": 0.8, "randwrite-4KiB": 0.8, "seqread-1MiB": 0.9}
	// cpuPaths report CPU per I/O of fio and of the server (the target,
	// the target and the bridge, or nbdkit) beside nbdkit's, for the R5′
	// cases.
	cpuPaths = []string{"engine-shm-mem", "engine-iwarp-mem", "capsule-shm-mem"}
)

// FUSE cases and mounts of scripts/fusebench.sh, each against the null
// go-fuse file system run the same way; client-* is the Go file client
// alone (no FUSE), which fusebench.sh runs for the read cases only.
// Metadata rates are against go-fuse's loopback of tmpfs.
var (
	fuseCases  = []string{"randread-4KiB", "seqread-1MiB", "seqwrite-1MiB", "bufread-1MiB"}
	fuseMounts = []string{"capsule-shm", "capsule-iwarp", "client-shm", "client-iwarp"}
	// clientCases are the cases the Go client alone runs.
	clientCases = map[string]bool{"randread-4KiB": true, "seqread-1MiB": true}
	// r6 carries bar R6′ and its goal: the mount over shm, for the two
	// read cases.
	r6 = map[string]struct{ bar, goal float64 }{
		"randread-4KiB/capsule-shm": {0.45, 0.6},
		"seqread-1MiB/capsule-shm":  {0.70, 0.9},
	}
	metaOps   = []string{"create", "stat", "unlink"}
	metaPaths = []string{"capsule-shm", "capsule-iwarp"}
)

// R12 rows of scripts/fusebench.sh: whole create+stat+unlink cycles
// against go-fuse's loopback of a directory on the disk under the
// target's data; 8 KiB buffered writes against the same mount's 1 MiB
// writes (MB/s: the request sizes differ); the untar of Go's src/
// against the same loopback, a ratio without a bar.
func r12Comparisons() []comparison {
	var cs []comparison
	for _, p := range metaPaths {
		cs = append(cs,
			comparison{name: "FUSEMeta/create-stat-unlink/" + p, base: "FUSEMeta/create-stat-unlink/loopback-disk", unit: "ops/s", bar: 0.5, goal: 0.8, id: "R12"},
			comparison{name: "FUSEWrite/seq-8KiB/" + p, base: "FUSEWrite/seq-1MiB/" + p, unit: "MB/s", bar: 0.5, goal: 0.8, id: "R12"},
			comparison{name: "FUSEUntar/gosrc/" + p, base: "FUSEUntar/gosrc/loopback-disk", unit: "files/s"},
		)
	}
	return cs
}

// R7′ cases of scripts/ecwritebench.sh: fio's nbd engine through the
// bridge on an ec: namespace against a file: namespace of the same target
// on the same disk, and QD1 write+flush latency against fio psync with
// fdatasync on a plain file there.
var (
	// ecRatios carry a bar (at least) and a goal on ec over file; the
	// random reads carry theirs against the v1 engine (below).
	ecRatios = []struct {
		c         string
		bar, goal float64
	}{{"randwrite-4KiB", 0.50, 0.80}, {"seqwrite-1MiB", 0.55, 0}, {"randread-4KiB", 0, 0}}
	// ecCPUCases report CPU per I/O of the target and the bridge, ec
	// against file where both ran.
	ecCPUCases = []string{"seqwrite-1MiB", "randwrite-4KiB", "randread-4KiB", "fua-4KiB"}
)

// comparisons lists the table's lines in order.
func comparisons() []comparison {
	var cs []comparison
	// R1, R2: one stream of each provider against memcpy or one TCP stream.
	for _, size := range []string{"4KiB", "64KiB", "1MiB"} {
		for _, t := range []struct {
			prov, base, id string
			bar            float64
		}{
			{"shm-write", "memcpy", "R1", 0.70},
			{"shm-read", "memcpy", "R1", 0.70},
			{"iwarp-write", "tcp", "R2", 0.75},
			{"iwarp-read", "tcp", "R2", 0.75},
		} {
			c := comparison{name: "Transfer/" + t.prov + "/" + size, base: "Transfer/" + t.base + "/" + size, unit: "MB/s"}
			if size == "1MiB" {
				c.bar, c.id = t.bar, t.id
			}
			cs = append(cs, c)
		}
	}
	for _, prov := range []string{"iwarp", "shm"} {
		cs = append(cs, comparison{name: "PingPong/" + prov + "/64B", base: "PingPong/tcp/64B", unit: "ns/op"})
	}
	// R3: the host library's 4 KiB random reads at QD32 (BenchmarkR3's
	// metrics): iwarp against fio psync on tmpfs, shm against iwarp.
	cs = append(cs,
		comparison{name: "R3", label: "R3/iwarp-IOPS", base: "R3Baseline/fio-psync-tmpfs", unit: "iwarp-IOPS", baseUnit: "IOPS", bar: 0.25, id: "R3"},
		comparison{name: "R3", label: "R3/shm-IOPS", base: "R3", baseLabel: "R3/iwarp-IOPS", unit: "shm-IOPS", baseUnit: "iwarp-IOPS", bar: 2, id: "R3"},
	)
	// R4: p50 of a QD1 4 KiB read (BenchmarkR4's metrics): iwarp at most
	// 15 µs over a loopback TCP round trip, shm at most 15 µs.
	cs = append(cs,
		comparison{name: "R4", label: "R4/iwarp-p50-ns", base: "R4", baseLabel: "R4/tcp-p50-ns", unit: "iwarp-p50-ns", baseUnit: "tcp-p50-ns", limitNS: 15000, id: "R4"},
		comparison{name: "R4", label: "R4/shm-p50-ns", unit: "shm-p50-ns", limitNS: 15000, id: "R4"},
	)
	// R5: fio's nbd engine through the bridge against nbdkit memory.
	for _, c := range blockCases {
		for _, p := range blockPaths {
			cmp := comparison{name: "Block/" + c + "/" + p, base: "Block/" + c + "/nbdkit-memory", unit: "IOPS"}
			if r5Cases[c] {
				cmp.bar, cmp.id = 0.60, "R5"
			}
			cs = append(cs, cmp)
		}
	}
	// R5′: fio with the capsule engine against fio's nbd engine on
	// nbdkit memory, and the CPU each side spends per I/O.
	for _, c := range blockCases {
		for _, p := range enginePaths {
			cmp := comparison{name: "Block/" + c + "/" + p, base: "Block/" + c + "/nbdkit-memory", unit: "IOPS"}
			if bar, ok := r5pBars[c]; ok && p == "engine-shm-mem" {
				cmp.bar, cmp.goal, cmp.id = bar, 1.2, "R5′"
			}
			cs = append(cs, cmp)
		}
	}
	for _, c := range blockCases {
		if _, ok := r5pBars[c]; !ok {
			continue
		}
		for _, p := range cpuPaths {
			for _, side := range []string{"fio", "target"} {
				name, base, unit := "Block/"+c+"/"+p, "Block/"+c+"/nbdkit-memory", side+"-µs/IO"
				cs = append(cs, comparison{name: name, label: name + "/" + side + "-cpu", base: base, baseLabel: base + "/" + side + "-cpu",
					unit: unit, cost: true, decimals: 1})
			}
		}
	}
	// R6: fio through the FUSE mount against the null go-fuse file system.
	for _, c := range fuseCases {
		for _, m := range fuseMounts {
			if strings.HasPrefix(m, "client-") && !clientCases[c] {
				continue
			}
			cmp := comparison{name: "FUSE/" + c + "/" + m, base: "FUSE/" + c + "/null", unit: "IOPS"}
			if b, ok := r6[c+"/"+m]; ok {
				cmp.bar, cmp.goal, cmp.id = b.bar, b.goal, "R6′"
			}
			cs = append(cs, cmp)
		}
	}
	for _, op := range metaOps {
		for _, p := range metaPaths {
			cs = append(cs, comparison{name: "FUSEMeta/" + op + "/" + p, base: "FUSEMeta/" + op + "/loopback-tmpfs", unit: "ops/s"})
		}
	}
	cs = append(cs, r12Comparisons()...)
	// R7: the erasure-coded store (chunkstore).
	cs = append(cs,
		comparison{name: "SeqWrite/4+2", base: "SeqWrite/1+0", unit: "MB/s", bar: 0.70, id: "R7"},
		comparison{name: "SeqRead/degraded", base: "SeqRead/healthy", unit: "MB/s", bar: 0.70, id: "R7"},
		comparison{name: "SeqWrite/1+0", base: "PlainFile", unit: "MB/s"},
		comparison{name: "Encode/store", base: "Encode/reedsolomon", unit: "MB/s"},
		comparison{name: "Encode/reedsolomon-purego", base: "Encode/reedsolomon", unit: "MB/s"},
		comparison{name: "Encode/reedsolomon", base: "Encode/memcpy", unit: "MB/s"},
	)
	// R7′: the erasure-coded write path end to end, through the bridge.
	for _, e := range ecRatios {
		cmp := comparison{name: "ECWrite/" + e.c + "/capsule-ec", base: "ECWrite/" + e.c + "/capsule-file", unit: "IOPS"}
		if e.bar > 0 {
			cmp.bar, cmp.goal, cmp.id = e.bar, e.goal, "R7′"
		}
		cs = append(cs, cmp)
	}
	cs = append(cs,
		// Sequential writes against the disk's own bandwidth (fio direct
		// writes): the log writes 1.59 device bytes per host byte, so
		// 0.63 is the ceiling once the page cache no longer absorbs them.
		comparison{name: "ECWrite/seqwrite-1MiB/capsule-ec", label: "ECWrite/seqwrite-1MiB/capsule-ec/disk", base: "ECWrite/seqwrite-1MiB/disk-direct", unit: "MB/s"},
		// The v1 engine (copy-on-write stripes, bin/target of
		// V1_COMMIT) on the same case: against the same file: baseline,
		// and the log against it.
		comparison{name: "ECWrite/seqwrite-1MiB/capsule-ec-v1", base: "ECWrite/seqwrite-1MiB/capsule-file", unit: "IOPS"},
		comparison{name: "ECWrite/seqwrite-1MiB/capsule-ec", label: "ECWrite/seqwrite-1MiB/capsule-ec/v1", base: "ECWrite/seqwrite-1MiB/capsule-ec-v1", unit: "IOPS"},
		// No slower than the v1 engine (copy-on-write stripes), ±10 %.
		comparison{name: "ECWrite/randread-4KiB/capsule-ec", label: "ECWrite/randread-4KiB/capsule-ec/v1", base: "ECWrite/randread-4KiB/capsule-ec-v1", unit: "IOPS", bar: 0.90, id: "R7′"},
		comparison{name: "ECWrite/write-amp/capsule-ec", unit: "write-amp", atMost: 2.5, goal: 1.8, decimals: 2, id: "R7′"},
		comparison{name: "ECWrite/space/capsule-ec", unit: "space-amp", atMost: 1.3, decimals: 2, id: "R7′"},
		// The FUA write one hop away (fio's capsule engine) carries the
		// bar; through the NBD bridge (a write and a flush, two hops) it
		// is shown for the tools that speak only NBD.
		comparison{name: "ECWrite/fua-4KiB/capsule-ec-engine", base: "ECWrite/fua-4KiB/plain-file", unit: "p50-ns", cost: true, atMost: 1.5, id: "R7′"},
		comparison{name: "ECWrite/fua-4KiB/capsule-file-engine", base: "ECWrite/fua-4KiB/plain-file", unit: "p50-ns", cost: true},
		comparison{name: "ECWrite/fua-4KiB/capsule-ec", base: "ECWrite/fua-4KiB/plain-file", unit: "p50-ns", cost: true},
		comparison{name: "ECWrite/fua-4KiB/capsule-file", base: "ECWrite/fua-4KiB/plain-file", unit: "p50-ns", cost: true},
	)
	for _, c := range ecCPUCases {
		name, base := "ECWrite/"+c+"/capsule-ec", "ECWrite/"+c+"/capsule-file"
		cs = append(cs, comparison{name: name, label: name + "/cpu", base: base, baseLabel: base + "/cpu", unit: "cpu-µs/IO", cost: true, decimals: 1})
	}
	cs = append(cs, comparison{name: "ECWrite/write-amp/capsule-ec", label: "ECWrite/write-amp/capsule-ec/cpu", unit: "cpu-µs/IO", cost: true, decimals: 1})
	// R8: the target's dispatch of 4 KiB commands, per command, beside
	// the provider's own ping-pong; no allocation.
	for _, prov := range []string{"iwarp", "shm"} {
		for _, op := range []string{"read", "write"} {
			for _, qd := range []string{"qd1", "qd32"} {
				cs = append(cs, comparison{name: "Dispatch/" + prov + "/" + op + "/" + qd, base: "PingPong/" + prov + "/64B", unit: "ns/op", noAllocs: true, id: "R8"})
			}
		}
	}
	return cs
}

// render writes the table. A row shows "-" for a benchmark or baseline
// that did not run, and is left out when neither ran.
func render(w io.Writer, results map[string]result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tvalue\tbaseline\tvalue\tratio\tbar\tallocs/op")
	num := func(r result, unit string, decimals int) (float64, string) {
		v, ok := r.median(unit)
		if !ok {
			return 0, "-"
		}
		return v, fmt.Sprintf("%.*f %s", decimals, v, unit)
	}
	verdict := func(ok bool, miss string) string {
		if ok {
			return "ok"
		}
		return miss
	}
	for _, c := range comparisons() {
		v, vs := num(results[c.name], c.unit, c.decimals)
		bu := c.unit
		if c.baseUnit != "" {
			bu = c.baseUnit
		}
		bv, bs, base := 0.0, "", ""
		if c.base != "" {
			bv, bs = num(results[c.base], bu, c.decimals)
			base = c.base
			if c.baseLabel != "" {
				base = c.baseLabel
			}
		}
		if vs == "-" && (bs == "" || bs == "-") {
			continue // neither ran: a part of the run that was left out
		}
		label := c.name
		if c.label != "" {
			label = c.label
		}
		ran := vs != "-" && bs != "-" && v > 0 && (c.base == "" || bv > 0)
		ratio, bar := "-", ""
		switch {
		case c.limitNS > 0:
			// An added latency (or a latency alone), not a ratio.
			if c.base == "" {
				ratio = ""
				bar = fmt.Sprintf("%s <= %s", c.id, micros(c.limitNS))
			} else {
				bar = fmt.Sprintf("%s <= +%s", c.id, micros(c.limitNS))
			}
			if ran {
				d := v - bv
				if c.base != "" {
					ratio = fmt.Sprintf("%+.1f µs", d/1e3)
				}
				bar += " " + verdict(d <= c.limitNS, "ABOVE")
			}
		case c.atMost > 0 || c.cost:
			// A cost, at most a bound: value alone (a ratio already) or
			// value over baseline.
			q, times := v, ""
			if c.base == "" {
				ratio = ""
			} else {
				times = "×"
				if ran {
					q = v / bv
					ratio = fmt.Sprintf("%.2f×", q)
				}
			}
			if c.atMost > 0 {
				bar = fmt.Sprintf("%s <= %.2f%s", c.id, c.atMost, times)
				if ran {
					bar += " " + verdict(q <= c.atMost, "ABOVE")
				}
			}
		default:
			q := 0.0
			if ran {
				q = v / bv
				if lowerIsBetter(c.unit) {
					q = bv / v // a speed ratio either way: above 1 is faster than the baseline
				}
				ratio = fmt.Sprintf("%.2f", q)
			}
			if c.bar > 0 {
				bar = fmt.Sprintf("%s >= %.2f", c.id, c.bar)
				if ran {
					bar += " " + verdict(q >= c.bar, "BELOW")
				}
			}
		}
		if c.goal > 0 {
			bar += fmt.Sprintf(" (goal %.2f)", c.goal)
		}
		av, allocs := num(results[c.name], "allocs/op", 0)
		allocs = strings.TrimSuffix(allocs, " allocs/op")
		if c.noAllocs {
			bar = c.id + " 0 allocs"
			if allocs != "-" {
				bar += " " + verdict(av == 0, "ABOVE")
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", label, vs, base, bs, ratio, bar, allocs)
	}
	return tw.Flush()
}

// micros formats ns as microseconds: "15 µs".
func micros(ns float64) string { return strconv.FormatFloat(ns/1e3, 'f', -1, 64) + " µs" }

func run(in io.Reader, out io.Writer) error {
	results, err := parse(in)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return errors.New("no benchmark results on stdin")
	}
	fmt.Fprintln(out, "ratios against same-run baselines (medians; shared/PERFORMANCE.md)")
	return render(out, results)
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}
