package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	capfs "github.com/capsule-storage/capsule/fs"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "null":
		err = runNull(os.Args[2:])
	case "loopback":
		err = runLoopback(os.Args[2:])
	case "meta":
		err = runMeta(os.Args[2:])
	case "client":
		err = runClient(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fusebench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: fusebench null [--size BYTES] [--splice] MOUNTPOINT | loopback [--splice] DIR MOUNTPOINT | meta [--files N] DIR | client --target URL [--rw randread|read] [--bs BYTES] FILE")
	os.Exit(2)
}

// mountOptions are capsule's mount's FUSE settings, for a fair baseline.
func mountOptions(splice bool, readAhead int) *fs.Options {
	sec := time.Second
	return &fs.Options{
		MountOptions: fuse.MountOptions{
			MaxWrite:      1 << 20,
			MaxReadAhead:  readAhead,
			DisableSplice: !splice,
			FsName:        "fusebench",
			Name:          "fusebench",
		},
		AttrTimeout:  &sec,
		EntryTimeout: &sec,
	}
}

// serve mounts root at mnt, reports it live and serves until a signal.
func serve(mnt string, root fs.InodeEmbedder, o *fs.Options) error {
	server, err := fs.Mount(mnt, root, o)
	if err != nil {
		return err
	}
	if _, err := os.Stat(mnt); err != nil {
		server.Unmount()
		return err
	}
	fmt.Printf("fusebench mounted at %s\n", mnt)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	select {
	case <-ctx.Done():
		return server.Unmount()
	case <-done:
		return nil
	}
}

// nullRoot is the null file system's root: one file, "data".
type nullRoot struct {
	fs.Inode
	size    uint64
	pattern []byte // 1 MiB of data every read copies from
}

// nullFile is the null file system's only file.
type nullFile struct {
	fs.Inode
	root *nullRoot
}

var (
	_ = (fs.NodeLookuper)((*nullRoot)(nil))
	_ = (fs.NodeReaddirer)((*nullRoot)(nil))
	_ = (fs.NodeGetattrer)((*nullFile)(nil))
	_ = (fs.NodeOpener)((*nullFile)(nil))
	_ = (fs.NodeReader)((*nullFile)(nil))
	_ = (fs.NodeWriter)((*nullFile)(nil))
	_ = (fs.NodeSetattrer)((*nullFile)(nil))
)

func (r *nullRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name != "data" {
		return nil, syscall.ENOENT
	}
	f := &nullFile{root: r}
	out.Attr.Mode = syscall.S_IFREG | 0o644
	out.Attr.Size = r.size
	return r.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2}), 0
}

func (r *nullRoot) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	return fs.NewListDirStream([]fuse.DirEntry{{Name: "data", Ino: 2, Mode: syscall.S_IFREG}}), 0
}

func (f *nullFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o644
	out.Size = f.root.size
	return 0
}

func (f *nullFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.Getattr(ctx, fh, out)
}

func (f *nullFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (f *nullFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if uint64(off) >= f.root.size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(uint64(len(dest)), f.root.size-uint64(off))
	p := f.root.pattern
	for done := uint64(0); done < n; {
		done += uint64(copy(dest[done:n], p[(uint64(off)+done)%uint64(len(p)):]))
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *nullFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return uint32(len(data)), 0
}

func runNull(args []string) error {
	fl := flag.NewFlagSet("null", flag.ExitOnError)
	size := fl.Uint64("size", 4<<30, "size of the file `data` in bytes")
	splice := fl.Bool("splice", false, "let go-fuse splice read replies")
	readAhead := fl.Int("max-readahead", 0, "kernel read-ahead in `bytes` (0: capsule's default)")
	fl.Parse(args)
	if fl.NArg() != 1 {
		usage()
	}
	root := &nullRoot{size: *size, pattern: make([]byte, 1<<20)}
	for i := range root.pattern {
		root.pattern[i] = byte(i*31 + i>>8)
	}
	ra := *readAhead
	if ra == 0 {
		ra = 128 << 10
	}
	return serve(fl.Arg(0), root, mountOptions(*splice, ra))
}

func runLoopback(args []string) error {
	fl := flag.NewFlagSet("loopback", flag.ExitOnError)
	splice := fl.Bool("splice", false, "let go-fuse splice read replies")
	fl.Parse(args)
	if fl.NArg() != 2 {
		usage()
	}
	root, err := fs.NewLoopbackRoot(fl.Arg(0))
	if err != nil {
		return err
	}
	return serve(fl.Arg(1), root, mountOptions(*splice, 128<<10))
}

func runMeta(args []string) error {
	fl := flag.NewFlagSet("meta", flag.ExitOnError)
	files := fl.Int("files", 2000, "how many `files` to create, stat and unlink")
	fl.Parse(args)
	if fl.NArg() != 1 {
		usage()
	}
	dir := filepath.Join(fl.Arg(0), fmt.Sprintf("meta-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	defer os.Remove(dir)
	names := make([]string, *files)
	for i := range names {
		names[i] = filepath.Join(dir, fmt.Sprintf("f%07d", i))
	}
	// spent sums the three phases' times (not the pause between them),
	// for the rate of whole create+stat+unlink cycles.
	var spent time.Duration
	rate := func(op func(string) error) (float64, error) {
		start := time.Now()
		for _, n := range names {
			if err := op(n); err != nil {
				return 0, err
			}
		}
		d := time.Since(start)
		spent += d
		return float64(len(names)) / d.Seconds(), nil
	}
	create, err := rate(func(n string) error {
		fd, err := syscall.Open(n, syscall.O_CREAT|syscall.O_EXCL|syscall.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return syscall.Close(fd)
	})
	if err != nil {
		return err
	}
	// Stat after the attribute timeout, so each stat asks the file system.
	time.Sleep(1100 * time.Millisecond)
	stat, err := rate(func(n string) error {
		var st syscall.Stat_t
		return syscall.Stat(n, &st)
	})
	if err != nil {
		return err
	}
	unlink, err := rate(syscall.Unlink)
	if err != nil {
		return err
	}
	fmt.Printf("meta create=%.0f stat=%.0f unlink=%.0f create-stat-unlink=%.0f\n", create, stat, unlink, float64(len(names))/spent.Seconds())
	return nil
}

func runClient(args []string) error {
	fl := flag.NewFlagSet("client", flag.ExitOnError)
	target := fl.String("target", "", "target `URL`")
	nqn := fl.String("nqn", "nqn.2026-11.io.capsule:default", "subsystem `NQN`")
	hostNQN := fl.String("hostnqn", "", "host `NQN` to present (default: the machine's, /etc/nvme/hostnqn or derived from /etc/machine-id)")
	rw := fl.String("rw", "randread", "randread or read (sequential)")
	bs := fl.Int("bs", 4096, "request size in `bytes`")
	runtime := fl.Duration("runtime", 5*time.Second, "how long to read")
	create := fl.Int64("create", 0, "first create FILE with this many `bytes` if it does not exist")
	fl.Parse(args)
	if fl.NArg() != 1 || *target == "" || *bs <= 0 {
		usage()
	}
	ctx := context.Background()
	opts := []capfs.Option{capfs.WithSubsystem(*nqn)}
	if *hostNQN != "" {
		opts = append(opts, capfs.WithHostNQN(*hostNQN))
	}
	c, err := capfs.Dial(ctx, *target, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := c.Lookup(ctx, capfs.RootIno, fl.Arg(0))
	if errors.Is(err, syscall.ENOENT) && *create > 0 {
		err = createFile(ctx, c, fl.Arg(0), *create)
		if err == nil {
			a, err = c.Lookup(ctx, capfs.RootIno, fl.Arg(0))
		}
	}
	if err != nil {
		return err
	}
	h, err := c.Open(ctx, a.Ino, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer c.Release(ctx, a.Ino, h)
	blocks := int64(a.Size) / int64(*bs)
	if blocks == 0 {
		return fmt.Errorf("%s is smaller than one request", fl.Arg(0))
	}
	buf := make([]byte, *bs)
	r := rand.New(rand.NewPCG(1, 2))
	var n, next int64
	cpu0 := cpuTime()
	start := time.Now()
	for time.Since(start) < *runtime {
		off := next
		if *rw == "randread" {
			off = r.Int64N(blocks)
		} else {
			next = (next + 1) % blocks
		}
		if _, err := c.Read(ctx, a.Ino, h, buf, off*int64(*bs)); err != nil {
			return err
		}
		n++
	}
	sec := time.Since(start).Seconds()
	cpu := cpuTime() - cpu0
	fmt.Printf("%.0f %.0f\n", float64(n)/sec, float64(n)*float64(*bs)/sec)
	fmt.Fprintf(os.Stderr, "client CPU %.1f us per request (user+system)\n", float64(cpu.Microseconds())/float64(max(n, 1)))
	return nil
}

// createFile creates name in the root directory and fills it with size
// bytes of a pattern, 1 MiB at a time.
func createFile(ctx context.Context, c *capfs.Client, name string, size int64) error {
	a, h, err := c.Create(ctx, capfs.RootIno, name, 0o644, uint32(os.Getuid()), uint32(os.Getgid()), syscall.O_RDWR)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for off := int64(0); off < size; off += int64(len(buf)) {
		if _, err := c.Write(ctx, a.Ino, h, buf[:min(int64(len(buf)), size-off)], off); err != nil {
			return err
		}
	}
	return c.Release(ctx, a.Ino, h)
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
