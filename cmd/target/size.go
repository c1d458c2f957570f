package main

import (
	"fmt"
	"strconv"
	"strings"
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
