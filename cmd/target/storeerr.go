package main

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/cliexit"
)

// storeError is an error of opening a store as one line: what failed and
// why, once. chunkstore's own text names every device with every layer of
// its error ("chunkstore: no store on these devices; chunkstore: device
// 0 (d/dev0): chunkstore: device missing: open d/dev0/identity: no such
// file or directory; …"); this groups the devices by cause: "no store on
// these devices; devices 0-5 missing (no such file or directory)".
func storeError(err error) string {
	var de *chunkstore.DevicesError
	if !errors.As(err, &de) {
		return strings.ReplaceAll(err.Error(), "chunkstore: ", "")
	}
	type group struct {
		cause string
		pos   []int
	}
	var groups []*group
	for _, d := range de.Devices {
		c := deviceCause(d.Err)
		var g *group
		for _, x := range groups {
			if x.cause == c {
				g = x
			}
		}
		if g == nil {
			g = &group{cause: c}
			groups = append(groups, g)
		}
		g.pos = append(g.pos, d.Pos)
	}
	top := deviceCause(de.Err)
	if i := strings.Index(top, " ("); i >= 0 {
		top = top[:i]
	}
	var parts []string
	if len(groups) != 1 || !strings.HasPrefix(groups[0].cause, top) {
		parts = append(parts, top) // else the one group says it: "devices 0-5: device in use …"
	}
	for _, g := range groups {
		noun := "device"
		if len(g.pos) > 1 {
			noun = "devices"
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", noun, positions(g.pos), g.cause))
	}
	return strings.Join(parts, "; ")
}

// deviceClasses are the causes a device's error is sorted by.
var deviceClasses = []error{chunkstore.ErrDeviceMissing, chunkstore.ErrDeviceEmpty, chunkstore.ErrDeviceSwapped,
	chunkstore.ErrForeignDevice, chunkstore.ErrDeviceBusy, chunkstore.ErrGeometryMismatch, chunkstore.ErrFormatV1}

// deviceCause is a device's error without its path: its class, and the
// system error under it.
func deviceCause(err error) string {
	for _, c := range deviceClasses {
		if errors.Is(err, c) {
			s := strings.TrimPrefix(c.Error(), "chunkstore: ")
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return s + " (" + errno.Error() + ")"
			}
			if cause := cliexit.Cause(err); cause != err.Error() {
				return s + " (" + cause + ")"
			}
			return s
		}
	}
	for _, c := range []error{chunkstore.ErrNoStore, chunkstore.ErrTooManyFailures} {
		if errors.Is(err, c) {
			return strings.TrimPrefix(c.Error(), "chunkstore: ")
		}
	}
	return strings.ReplaceAll(err.Error(), "chunkstore: ", "")
}

// positions writes device positions, runs as ranges: 0-3, 5.
func positions(ps []int) string {
	var out []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		switch {
		case j == i:
			out = append(out, fmt.Sprint(ps[i]))
		case j == i+1:
			out = append(out, fmt.Sprint(ps[i]), fmt.Sprint(ps[j]))
		default:
			out = append(out, fmt.Sprintf("%d-%d", ps[i], ps[j]))
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}

// lineError is an error of the store as one line for the operator
// (storeError's), with the chunkstore error beneath it for errors.Is.
type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }

// misuseError is a lineError that is a bad flag found only against the
// store (an --ec that is not its geometry): exit status 2, as usageError,
// with the store's error beneath for errors.Is.
type misuseError struct{ lineError }

func (e *misuseError) ExitCode() int { return exitUsage }
