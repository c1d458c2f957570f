// Package profenv starts the profiles a capsule command was asked for in
// its environment, for `go tool pprof` and `go tool trace`:
//
//	CAPSULE_CPUPROFILE=FILE  a CPU profile of the whole run (runtime/pprof)
//	CAPSULE_TRACE=FILE       an execution trace of the whole run
//	                         (runtime/trace): where goroutines wait to run,
//	                         block and make system calls
//
// A file that cannot be created is skipped: profiling never stops a
// command from running.
package profenv

import (
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Start starts what the environment asks for and returns the function
// that stops it and writes the files out, to be called before the
// command exits.
func Start() (stop func()) {
	var stops []func()
	for _, p := range []struct {
		env         string
		start       func(io.Writer) error
		stopProfile func()
	}{
		{"CAPSULE_CPUPROFILE", pprof.StartCPUProfile, pprof.StopCPUProfile},
		{"CAPSULE_TRACE", trace.Start, trace.Stop},
	} {
		path := os.Getenv(p.env)
		if path == "" {
			continue
		}
		f, err := os.Create(path)
		if err != nil {
			continue
		}
		if p.start(f) != nil {
			f.Close()
			continue
		}
		stops = append(stops, func() { p.stopProfile(); f.Close() })
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
