package mapdbbench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// reportConfig is what TestReport measures, from the environment.
type reportConfig struct {
	dir            string   // MAPDBBENCH_DIR: where the replicas go (a real disk)
	kinds          []Kind   // MAPDBBENCH_DBS: bbolt,pebble
	layouts        []Layout // MAPDBBENCH_LAYOUTS: sequential,random
	seqPages       int      // MAPDBBENCH_SEQ_PAGES: N of the sequential layout
	randPages      int      // MAPDBBENCH_RAND_PAGES: N of the random layout
	batchSizes     []int    // MAPDBBENCH_BATCHES: checkpoint sizes B
	replicas       []int    // replica counts of the checkpoint workload
	steadyBatches  int      // MAPDBBENCH_STEADY: batches of the steady state
	steadyB        int      // pages per steady-state batch
	steadyReplicas int      // MAPDBBENCH_STEADY_REPLICAS
	out            string   // MAPDBBENCH_OUT: also write the tables there
	// MAPDBBENCH_QUICK shrinks everything, to check the harness.
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func loadConfig(t *testing.T) reportConfig {
	c := reportConfig{
		dir:            os.Getenv("MAPDBBENCH_DIR"),
		seqPages:       1 << 20,
		randPages:      1 << 18,
		batchSizes:     []int{1024, 8192, 65536},
		replicas:       []int{1, 6},
		steadyBatches:  200,
		steadyB:        8192,
		steadyReplicas: 1,
		out:            os.Getenv("MAPDBBENCH_OUT"),
	}
	if c.dir == "" {
		c.dir = "/var/tmp/mapdbbench"
	}
	if os.Getenv("MAPDBBENCH_QUICK") != "" {
		c.seqPages, c.randPages = 1<<15, 1<<13
		c.batchSizes = []int{256, 1024, 4096}
		c.steadyBatches, c.steadyB = 20, 1024
	}
	c.seqPages = envInt(t, "MAPDBBENCH_SEQ_PAGES", c.seqPages)
	c.randPages = envInt(t, "MAPDBBENCH_RAND_PAGES", c.randPages)
	c.steadyBatches = envInt(t, "MAPDBBENCH_STEADY", c.steadyBatches)
	c.steadyReplicas = envInt(t, "MAPDBBENCH_STEADY_REPLICAS", c.steadyReplicas)
	if v := os.Getenv("MAPDBBENCH_BATCHES"); v == "none" {
		c.batchSizes = nil
	} else if v != "" {
		c.batchSizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("MAPDBBENCH_BATCHES=%q: want positive integers separated by commas", v)
			}
			c.batchSizes = append(c.batchSizes, n)
		}
	}
	layouts := os.Getenv("MAPDBBENCH_LAYOUTS")
	if layouts == "" {
		layouts = "sequential,random"
	}
	for l := range strings.SplitSeq(layouts, ",") {
		switch l {
		case "sequential":
			c.layouts = append(c.layouts, Sequential)
		case "random":
			c.layouts = append(c.layouts, Random)
		default:
			t.Fatalf("MAPDBBENCH_LAYOUTS=%q: want sequential and/or random", layouts)
		}
	}
	kinds := os.Getenv("MAPDBBENCH_DBS")
	if kinds == "" {
		kinds = "bbolt,pebble"
	}
	for k := range strings.SplitSeq(kinds, ",") {
		if Kind(k) != Bolt && Kind(k) != Pebble {
			t.Fatalf("MAPDBBENCH_DBS=%q: want bbolt and/or pebble", kinds)
		}
		c.kinds = append(c.kinds, Kind(k))
	}
	return c
}

// batchesFor is how many checkpoints of size b are measured: enough for
// a stable mean, few enough for the large ones to stay quick.
func batchesFor(b int) int { return max(3, min(16, (1<<17)/b)) }

type checkpointRow struct {
	kind   Kind
	layout Layout
	b      int
	s      Series
}

type steadyRow struct {
	kind    Kind
	s       Series
	logical int64
	closed  Usage // first replica after Close
}

type loadRow struct {
	kind       Kind
	layout     Layout
	n          int
	end        Usage // after all the workloads, closed
	warm, cold Load
	build      time.Duration
	goroutines int
	built      Usage // right after the build
}

// TestReport measures bbolt and pebble as the chunkstore map database and
// prints the tables README.md records. It runs only with MAPDBBENCH set:
//
//	MAPDBBENCH=1 go test -run TestReport -v -timeout 30m
func TestReport(t *testing.T) {
	if os.Getenv("MAPDBBENCH") == "" {
		t.Skip("set MAPDBBENCH=1 to run the bbolt vs pebble measurements (several minutes, GBs of disk writes)")
	}
	c := loadConfig(t)
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fs := FSType(c.dir)
	if fs == "tmpfs" {
		t.Fatalf("%s is on tmpfs: set MAPDBBENCH_DIR to a directory on a real disk", c.dir)
	}
	busy := cpuBusy(3 * time.Second)
	if busy > 0.2 {
		t.Logf("WARNING: the machine's CPUs were %.0f%% busy before the run: other work will skew the numbers", 100*busy)
	}
	t.Logf("CPU busy before the run: %.0f%%", 100*busy)
	t.Logf("dir %s (%s), GOMAXPROCS %d, sequential N=%d, random N=%d, B=%v, steady %dx%d on %d replicas",
		c.dir, fs, runtime.GOMAXPROCS(0), c.seqPages, c.randPages, c.batchSizes, c.steadyBatches, c.steadyB, c.steadyReplicas)

	var (
		cps    []checkpointRow
		steady []steadyRow
		loads  []loadRow
	)
	maxReplicas := max(c.steadyReplicas, c.replicas[len(c.replicas)-1])
	start := time.Now()
	busy0, _ := procStat()
	cpu0 := CPUTime()
	for _, layout := range c.layouts {
		n := c.seqPages
		if layout == Random {
			n = c.randPages
		}
		// Both databases' sets are open side by side and measured in turn,
		// config by config, so that other load on the machine falls on both.
		var sets []*Set
		var rows []*loadRow
		for _, kind := range c.kinds {
			base := filepath.Join(c.dir, string(kind)+"-"+layout.String())
			s, err := NewSet(kind, layout, n, maxReplicas, base, 1)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Remove()
			lr := &loadRow{kind: kind, layout: layout, n: n, build: s.BuildTime, goroutines: s.Goroutines}
			if lr.built, err = DirUsage(s.Dirs[0]); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %s: built %d pages in %d replicas in %v (%s each)", kind, layout, n, maxReplicas,
				s.BuildTime.Round(time.Millisecond), mb(lr.built.Size))
			sets, rows = append(sets, s), append(rows, lr)
		}
		quiesce := func() {
			for _, s := range sets {
				if err := s.Quiesce(); err != nil {
					t.Fatal(err)
				}
			}
		}

		for _, b := range c.batchSizes {
			for _, reps := range c.replicas {
				for _, s := range sets {
					quiesce()
					if err := s.Apply(s.NextBatch(b), reps); err != nil { // warm-up
						t.Fatal(err)
					}
					var batches []*Batch
					for range batchesFor(b) {
						batches = append(batches, s.NextBatch(b))
					}
					r, err := s.Measure(batches, reps)
					if err != nil {
						t.Fatal(err)
					}
					cps = append(cps, checkpointRow{s.Kind, layout, b, r})
					t.Logf("%s %s B=%d x%d: %.1f ms/batch; B/key: %.0f written, %.0f write_bytes, %.0f to the device (everyone's)",
						s.Kind, layout, b, reps, ms(r.MeanBatch()), float64(r.WChar+r.DrainWChar)/float64(r.Keys),
						float64(r.Write+r.DrainWrite)/float64(r.Keys), float64(r.Disk+r.DrainDisk)/float64(r.Keys))
				}
			}
		}

		if layout == Random && c.steadyBatches > 0 {
			for _, s := range sets {
				quiesce()
				var batches []*Batch
				for range c.steadyBatches {
					batches = append(batches, s.NextBatch(c.steadyB))
				}
				r, err := s.Measure(batches, c.steadyReplicas)
				if err != nil {
					t.Fatal(err)
				}
				steady = append(steady, steadyRow{kind: s.Kind, s: r, logical: s.LogicalBytes()})
				t.Logf("%s steady: p50 %.1f ms, p99 %.1f ms, %s at the end; B/key: %.0f written, %.0f write_bytes, %.0f to the device (everyone's)",
					s.Kind, ms(r.Percentile(50)), ms(r.Percentile(99)), mb(r.End.Size), float64(r.WChar+r.DrainWChar)/float64(r.Keys),
					float64(r.Write+r.DrainWrite)/float64(r.Keys), float64(r.Disk+r.DrainDisk)/float64(r.Keys))
			}
		}

		for _, s := range sets {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range sets {
			lr := rows[i]
			var err error
			if lr.end, err = DirUsage(s.Dirs[0]); err != nil {
				t.Fatal(err)
			}
			for j := range steady {
				if layout == Random && steady[j].kind == s.Kind {
					steady[j].closed = lr.end
				}
			}
			for range 2 { // the second warm load is the one recorded
				if lr.warm, err = MeasureLoad(s.Kind, s.Dirs[0], false); err != nil {
					t.Fatal(err)
				}
			}
			if lr.cold, err = MeasureLoad(s.Kind, s.Dirs[0], true); err != nil {
				t.Fatal(err)
			}
			loads = append(loads, *lr)
			if err := s.Remove(); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.Remove(c.dir) // only if empty
	wall := time.Since(start)
	busy1, _ := procStat()
	other := (busy1 - busy0 - (CPUTime() - cpu0).Seconds()) / wall.Seconds()
	t.Logf("total %v; other processes and kernel threads used %.2f of the %d CPUs on average meanwhile", wall.Round(time.Second), other, runtime.NumCPU())

	w := io.Writer(os.Stdout)
	if c.out != "" {
		f, err := os.Create(c.out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprintf(w, "\nRun: %v on %d CPUs; other processes and kernel threads (I/O completion included) used %.2f CPUs on average meanwhile (%.0f%% busy before the run).\n",
		wall.Round(time.Second), runtime.NumCPU(), other, 100*busy)
	printReport(w, c, cps, steady, loads)
}

// procStat reads the machine's busy and total CPU time (all CPUs, all
// processes) from /proc/stat, in seconds (USER_HZ is 100 on Linux).
func procStat() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v / 100
		if i != 3 && i != 4 { // idle, iowait
			busy += v / 100
		}
	}
	return busy, total
}

// cpuBusy is the fraction of the machine's CPU time not idle over d.
func cpuBusy(d time.Duration) float64 {
	b0, t0 := procStat()
	time.Sleep(d)
	b1, t1 := procStat()
	if t1 <= t0 {
		return 0
	}
	return (b1 - b0) / (t1 - t0)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

func printReport(w io.Writer, c reportConfig, cps []checkpointRow, steady []steadyRow, loads []loadRow) {
	perKey := func(n int64, keys int) float64 { return float64(n) / float64(keys) }
	usPerKey := func(d time.Duration, keys int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(keys) }

	fmt.Fprintf(w, "\n### 1. Checkpoint cost (one fsynced transaction per replica; replicas in parallel)\n\n")
	fmt.Fprintf(w, "Sequential layout: N=%d pages, %d B values, B consecutive pages. Random layout: N=%d pages, %d B values, B uniform pages (sorted).\n",
		c.seqPages, ValueSize(Sequential.Runs()), c.randPages, ValueSize(Random.Runs()))
	fmt.Fprintf(w, "µs/key is the mean batch time over B. Bytes and CPU are summed over all replicas, per page of the batch, and include the\n")
	fmt.Fprintf(w, "background work (pebble flushes/compactions) the series left running until it stopped (\"drain\"). \"written\" is\n")
	fmt.Fprintf(w, "/proc/self/io wchar, the bytes handed to write(2)/pwrite(2), all fsynced; \"write_bytes\" is /proc/self/io write_bytes.\n\n")
	fmt.Fprintf(w, "| db | layout | B | replicas | batches | ms/batch | p99 ms | µs/key | written B/key | write_bytes B/key | CPU µs/key | drain s |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range cps {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.1f | %.1f | %.2f | %.0f | %.0f | %.2f | %.1f |\n",
			r.kind, r.layout, r.b, r.s.Replicas, len(r.s.Times), ms(r.s.MeanBatch()), ms(r.s.Percentile(99)),
			usPerKey(r.s.MeanBatch(), r.b),
			perKey(r.s.WChar+r.s.DrainWChar, r.s.Keys), perKey(r.s.Write+r.s.DrainWrite, r.s.Keys),
			usPerKey(r.s.CPU+r.s.DrainCPU, r.s.Keys), r.s.DrainTime.Seconds())
	}

	if len(steady) > 0 {
		fmt.Fprintf(w, "\n### 2. Steady state: %d random batches of %d pages back to back, N=%d, replicas in parallel: %d\n\n",
			c.steadyBatches, c.steadyB, c.randPages, c.steadyReplicas)
		fmt.Fprintf(w, "Sizes are of one replica (WAL = pebble's *.log files, in the size); logical = N x (16 + %d) B.\n\n", ValueSize(Random.Runs()))
		fmt.Fprintf(w, "| db | p50 ms | p99 ms | max ms | mean ms | written B/key | write_bytes B/key | CPU µs/key | drain s | size at end | of which WAL | size closed | files | logical | space amp | excl. WAL |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range steady {
			big := r.s.End
			if r.closed.Size > big.Size {
				big = r.closed
			}
			fmt.Fprintf(w, "| %s | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.2f | %.1f | %s | %s | %s | %d | %s | %.2f | %.2f |\n",
				r.kind, ms(r.s.Percentile(50)), ms(r.s.Percentile(99)), ms(r.s.Percentile(100)), ms(r.s.MeanBatch()),
				perKey(r.s.WChar+r.s.DrainWChar, r.s.Keys), perKey(r.s.Write+r.s.DrainWrite, r.s.Keys),
				usPerKey(r.s.CPU+r.s.DrainCPU, r.s.Keys), r.s.DrainTime.Seconds(),
				mb(r.s.End.Size), mb(r.s.End.WAL), mb(r.closed.Size), r.closed.Files, mb(r.logical),
				float64(big.Size)/float64(r.logical), float64(big.Size-big.WAL)/float64(r.logical))
		}
	}

	fmt.Fprintf(w, "\n### 3. Load: open one replica and iterate every page once (CRC checked), after the workloads above\n\n")
	fmt.Fprintf(w, "Cold: the replica's files dropped from the page cache first (fadvise DONTNEED). Space amp = final size / logical.\n\n")
	fmt.Fprintf(w, "| db | layout | N | build s (%d replicas) | size built | size final | of which WAL | files | space amp | warm open ms | warm iterate ms | cold open ms | cold iterate ms | cold read_bytes MB | goroutines per replica |\n", max(c.steadyReplicas, c.replicas[len(c.replicas)-1]))
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	nrep := max(c.steadyReplicas, c.replicas[len(c.replicas)-1])
	for _, r := range loads {
		logical := int64(r.n) * int64(KeySize+ValueSize(r.layout.Runs()))
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %s | %s | %s | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n",
			r.kind, r.layout, r.n, r.build.Seconds(), mb(r.built.Size), mb(r.end.Size), mb(r.end.WAL), r.end.Files,
			float64(r.end.Size)/float64(logical),
			ms(r.warm.Open), ms(r.warm.Iterate), ms(r.cold.Open), ms(r.cold.Iterate), float64(r.cold.Read)/1e6,
			float64(r.goroutines)/float64(nrep))
	}
}
