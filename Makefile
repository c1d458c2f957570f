# capsule: see README.md. `make run` starts the target, `make test` checks everything.
GO      ?= go
BIN     := bin
GOFILES  = $(shell find . -name '*.go' -not -path './.git/*' -not -path './bin/*')

# Debian packages the tests need: the verbs provider is vetted and built
# with its C libraries; fuse3 gives fusermount3 for the FUSE mount; fio,
# nbdkit, libnbd-bin (nbdinfo, nbdcopy), python3-libnbd (nbdsh) and qemu-utils are the
# NBD clients and peers no one here wrote; rsync drives the FUSE mount
# tests; prometheus gives promtool, which checks the /metrics output, and
# the server that scrapes it in integration/metrics_test.go; tshark checks
# the wire (make wirecheck).
TEST_DEBS := libibverbs-dev librdmacm-dev pkg-config fuse3 fio nbdkit libnbd-bin python3-libnbd qemu-utils rsync prometheus etcd-server

# fio's headers for the capsule ioengine: the source package of the fio
# Debian installed, configured (scripts/fio-src.sh).
FIO_SRC := $(BIN)/fio-src
FIO_CGO_CFLAGS = -O2 -g -D_GNU_SOURCE -I$(abspath $(FIO_SRC)) -include $(abspath $(FIO_SRC))/config-host.h

.PHONY: all build run test deps vet fmtcheck unit allocs bench wirecheck clean fio-engine

all: build

build:
	$(GO) build -o $(BIN)/target ./cmd/target
	$(GO) build -o $(BIN)/mount ./cmd/mount

run: build
	./$(BIN)/target

# bin/fio-capsule.so: fio's external ioengine over the Go host library
# (cmd/fio-capsule), built against the installed fio's own headers.
# FIO_ENGINE_TAGS=rdma links the verbs provider in (rdma:// URLs).
FIO_ENGINE_TAGS ?=
fio-engine:
	./scripts/fio-src.sh $(FIO_SRC)
	CGO_CFLAGS="$(FIO_CGO_CFLAGS)" $(GO) vet -tags "fioengine $(FIO_ENGINE_TAGS)" ./cmd/fio-capsule
	CGO_CFLAGS="$(FIO_CGO_CFLAGS)" $(GO) build -tags "fioengine $(FIO_ENGINE_TAGS)" -buildmode=c-shared -o $(BIN)/fio-capsule.so ./cmd/fio-capsule
	rm -f $(BIN)/fio-capsule.h

deps:
	./scripts/deps.sh $(TEST_DEBS)

vet: deps
	$(GO) vet ./...
	$(GO) vet -tags rdma ./rdma/...
	$(GO) build -tags rdma ./...

fmtcheck:
	@out="$$(gofmt -l $(GOFILES))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# go test runs every fuzz target's seed corpus (f.Add and testdata/fuzz).
unit:
	$(GO) test -race -count=1 -timeout 30m ./...

# The zero-allocation checks (R8) skip under the race detector, which
# allocates on its own: run them once more without it.
allocs:
	$(GO) test -count=1 -run 'Alloc' ./rdma/... ./nvmeof/... ./cmd/fio-capsule

test: deps vet fmtcheck fio-engine unit allocs build

# The block cases need fio and nbdkit (TEST_DEBS) and the fio engine; see
# scripts/bench.sh.
bench: deps build fio-engine
	./scripts/bench.sh

wirecheck:
	./scripts/deps.sh tshark
	./scripts/wirecheck.sh

clean:
	rm -rf $(BIN)
