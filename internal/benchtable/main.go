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
	name, base string
	unit       string  // "MB/s", "IOPS", …: higher is better; "ns/op": lower is better
	baseUnit   string  // the baseline's unit, when not unit
	bar        float64 // the ratio to reach, 0 for none
	id         string  // the bar's id in shared/PERFORMANCE.md
}

// Block cases and paths of the fio runs of scripts/bench.sh, each
// against fio on nbdkit's memory plugin run the same way.
var (
	blockCases = []string{"randread-4KiB", "randwrite-4KiB", "seqread-1MiB", "seqwrite-1MiB"}
	blockPaths = []string{"capsule-shm-mem", "capsule-iwarp-mem", "capsule-shm-ec", "capsule-iwarp-ec"}
	// r5Cases carry bar R5.
	r5Cases = map[string]bool{"randread-4KiB": true, "seqread-1MiB": true}
)

// comparisons lists the table's lines in order.
func comparisons() []comparison {
	var cs []comparison
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
	// R3: the host library's 4 KiB random reads at QD32 over iwarp
	// (BenchmarkR3's iwarp-IOPS) against fio psync on tmpfs.
	cs = append(cs, comparison{name: "R3", base: "R3Baseline/fio-psync-tmpfs", unit: "iwarp-IOPS", baseUnit: "IOPS", bar: 0.25, id: "R3"})
	for _, c := range blockCases {
		for _, p := range blockPaths {
			cmp := comparison{name: "Block/" + c + "/" + p, base: "Block/" + c + "/nbdkit-memory", unit: "IOPS"}
			if r5Cases[c] {
				cmp.bar, cmp.id = 0.60, "R5"
			}
			cs = append(cs, cmp)
		}
	}
	return cs
}

// render writes the table.
func render(w io.Writer, results map[string]result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tvalue\tbaseline\tvalue\tratio\tbar\tallocs/op")
	num := func(r result, unit string) (float64, string) {
		v, ok := r.median(unit)
		if !ok {
			return 0, "-"
		}
		return v, fmt.Sprintf("%.0f %s", v, unit)
	}
	for _, c := range comparisons() {
		v, vs := num(results[c.name], c.unit)
		bu := c.unit
		if c.baseUnit != "" {
			bu = c.baseUnit
		}
		bv, bs := num(results[c.base], bu)
		ratio, bar := "-", ""
		if vs != "-" && bs != "-" && v > 0 && bv > 0 {
			q := v / bv
			if c.unit == "ns/op" {
				q = bv / v // a speed ratio either way: above 1 is faster than the baseline
			}
			ratio = fmt.Sprintf("%.2f", q)
			if c.bar > 0 {
				verdict := "ok"
				if q < c.bar {
					verdict = "BELOW"
				}
				bar = fmt.Sprintf("%s >= %.2f %s", c.id, c.bar, verdict)
			}
		} else if c.bar > 0 {
			bar = fmt.Sprintf("%s >= %.2f", c.id, c.bar)
		}
		_, allocs := num(results[c.name], "allocs/op")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.name, vs, c.base, bs, ratio, bar, strings.TrimSuffix(allocs, " allocs/op"))
	}
	return tw.Flush()
}

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
