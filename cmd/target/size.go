package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// parseSize reads a byte count written as 4096, 4k, 64KiB, 512MiB or 1GiB
// (K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024; KB/MB/GB/TB powers of 1000).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	if i == 0 || t == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit such as KiB, MiB or GiB", s)
	}
	num, unit := t, ""
	if i > 0 {
		num, unit = t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	var mul int64
	switch unit {
	case "", "B":
		mul = 1
	case "K", "KIB":
		mul = 1 << 10
	case "M", "MIB":
		mul = 1 << 20
	case "G", "GIB":
		mul = 1 << 30
	case "T", "TIB":
		mul = 1 << 40
	case "KB":
		mul = 1e3
	case "MB":
		mul = 1e6
	case "GB":
		mul = 1e9
	case "TB":
		mul = 1e12
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	if n > (1<<62)/mul {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mul, nil
}

// maxAutoWriteCache bounds --write-cache auto, as ZFS bounds its dirty
// data (zfs_dirty_data_max_max).
const maxAutoWriteCache = 4 << 30

// defaultWriteCache is --write-cache auto: a tenth of the machine's
// memory, at most maxAutoWriteCache, in whole MiB (ZFS's default for the
// data a pool may hold dirty before it syncs).
func defaultWriteCache() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	n := int64(si.Totalram) * int64(si.Unit) / 10
	return min(n, maxAutoWriteCache) &^ (1<<20 - 1)
}

// parseWriteCache reads --write-cache: auto, 0, or a size.
func parseWriteCache(s string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		return defaultWriteCache(), nil
	}
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--write-cache: %w", err)
	}
	return n, nil
}
