# ketch — one hand-written Makefile.
#   make            build bin/ and lib/
#   make run        install what is missing, build, start one member on 127.0.0.1
#   make test       install what is missing, build, run every test ("N passed, M failed")
#   make asan       the same suite under ASan+UBSan (objects in build/asan)
#   make tsan       the threaded server's tests under ThreadSanitizer (build/tsan)
#   make fuzz F=wal_record SECONDS=60   run one libFuzzer target (clang)
#   make sim-soak SEEDS=20000           the cluster simulation over more seeds
#   make sim SEED=S                     replay one seed of it, with its trace
#   make soak DURATION=600              real-process fault tests (kill, pause, partition)
#                                       with varied seeds for that many seconds
#   make deps       apt-get install the Debian packages that are missing
#   make bench      ketch vs etcd, the standard suite (a few minutes), plaintext and TLS -> bench/
# Out-of-tree builds: make O=/tmp/x puts objects, bin/ and lib/ under /tmp/x.

O ?= build
ifeq ($(O),build)
BINDIR ?= bin
LIBDIR ?= lib
else
BINDIR ?= $(O)/bin
LIBDIR ?= $(O)/lib
endif

CC ?= cc
VERSION := 0.1.0
PKGS := msgpack libsodium liblz4 yaml-0.1 openssl libcares libmicrohttpd
# What libketch links (its .so, ketch.pc's Requires.private).
LIBKETCH_PKGS := msgpack libsodium openssl libcares
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wimplicit-fallthrough
CFLAGS ?= -O2 -g
ifeq ($(SAN),1)
CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(TSAN),1)
CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
LDFLAGS += -fsanitize=thread
endif
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DKT_VERSION='"$(VERSION)"' -fPIC $(WARN) $(CFLAGS) \
             $(shell pkg-config --cflags $(PKGS) 2>/dev/null) -MMD -MP
LDLIBS := -lev $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread -lm

# Every .c in the server folders except program mains (*_main.c).
SERVER_SRCS := $(filter-out %_main.c,$(wildcard core/*.c wal/*.c snap/*.c net/*.c))
CLIENT_SRCS := $(filter-out client/example.c,$(wildcard client/*.c)) core/base.c net/proto.c net/schema.c net/tls.c
KETCH_MAIN := net/ketch_main.c
KETCHCTL_SRCS := $(wildcard tools/ketchctl/*.c)
KETCHUTL_SRCS := $(wildcard tools/ketchutl/*.c)
BENCH_SRCS := $(wildcard tools/bench/*.c)
# ketch-operator; its pure part (spec, records, the decision) is also linked
# by its unit test and its fuzz target.
OPERATOR_SRCS := $(wildcard tools/operator/*.c)
OPERATOR_PURE_SRCS := tools/operator/spec.c tools/operator/record.c tools/operator/plan.c
# The gRPC codec shared by ketch-bench's etcd target and the gRPC bridge: the
# .proto files (etcd's wire contract) become C with protoc-c in the build.
GRPC_SRCS := $(wildcard tools/grpc/*.c)
BRIDGE_SRCS := $(wildcard tools/grpc-bridge/*.c)
# etcd's backend schema to and from ketch snapshots (ketchutl migrate/export,
# ketch-grpc's Snapshot), on snap/bbolt and the mvccpb/leasepb protos.
ETCDDB_SRCS := $(wildcard tools/etcddb/*.c)
ETCDDB_LIBS = $(shell pkg-config --libs libcrypto 2>/dev/null)
PROTOS := $(wildcard tools/grpc/proto/*.proto)
PROTO_C := $(patsubst tools/grpc/proto/%.proto,$(O)/gen/grpc/%.pb-c.c,$(PROTOS))
GRPC_PKGS := libnghttp2 libprotobuf-c
GRPC_CFLAGS = -I$(O)/gen/grpc $(shell pkg-config --cflags $(GRPC_PKGS) 2>/dev/null)
GRPC_LIBS = $(shell pkg-config --libs $(GRPC_PKGS) 2>/dev/null)
UNIT_TESTS := $(wildcard test/unit/*_test.c)
FUZZ_TARGETS := $(wildcard test/fuzz/*_fuzz.c)
PERF_SRCS := $(wildcard test/perf/*_perf.c)
INTEG_SRCS := $(wildcard test/integration/*.c)

obj = $(patsubst %.c,$(O)/obj/%.o,$(1))
SERVER_OBJS := $(call obj,$(SERVER_SRCS))
CLIENT_OBJS := $(call obj,$(sort $(CLIENT_SRCS)))
LIBKT := $(O)/libkt.a

BINS := $(BINDIR)/ketch
ifneq ($(KETCHCTL_SRCS),)
BINS += $(BINDIR)/ketchctl
endif
ifneq ($(KETCHUTL_SRCS),)
BINS += $(BINDIR)/ketchutl
endif
ifneq ($(BENCH_SRCS),)
BINS += $(BINDIR)/ketch-bench
endif
ifneq ($(BRIDGE_SRCS),)
BINS += $(BINDIR)/ketch-grpc
endif
ifneq ($(OPERATOR_SRCS),)
BINS += $(BINDIR)/ketch-operator
endif
LIBS := $(LIBDIR)/libketch.a $(LIBDIR)/libketch.so $(LIBDIR)/ketch.pc
UNIT_BINS := $(patsubst test/unit/%.c,$(O)/test/%,$(UNIT_TESTS))
FUZZ_REPLAYS := $(patsubst test/fuzz/%_fuzz.c,$(O)/test/fuzz/%_replay,$(FUZZ_TARGETS))
PERF_BINS := $(patsubst test/perf/%.c,$(O)/perf/%,$(PERF_SRCS))
INTEG_BINS := $(patsubst test/integration/%.c,$(O)/test/integration/%,$(INTEG_SRCS))

.PHONY: all deps run test asan tsan fuzz perf sim sim-soak soak clean format format-check bench
.SECONDARY:
all: $(BINS) $(LIBS)

$(O)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(LIBKT): $(SERVER_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBDIR)/libketch.a: $(CLIENT_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBDIR)/libketch.so: $(CLIENT_OBJS) client/ketch.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,--version-script=client/ketch.map -o $@ $(CLIENT_OBJS) $(LDFLAGS) \
	  $(shell pkg-config --libs $(LIBKETCH_PKGS) 2>/dev/null) -lpthread

$(LIBDIR)/ketch.pc: Makefile
	@mkdir -p $(dir $@)
	printf 'libdir=%s\nincludedir=%s\n\nName: ketch\nDescription: C client library for the ketch key-value store\nVersion: $(VERSION)\nRequires.private: $(LIBKETCH_PKGS)\nLibs: -L$${libdir} -Wl,-rpath,$${libdir} -lketch\nCflags: -I$${includedir}\n' "$(abspath $(LIBDIR))" "$(CURDIR)/client" > $@

$(BINDIR)/ketch: $(call obj,$(KETCH_MAIN)) $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/ketchctl: $(call obj,$(KETCHCTL_SRCS)) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/ketch-operator: $(call obj,$(OPERATOR_SRCS)) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(O)/gen/grpc/%.pb-c.c $(O)/gen/grpc/%.pb-c.h: tools/grpc/proto/%.proto
	@mkdir -p $(dir $@)
	protoc-c --proto_path=tools/grpc/proto --c_out=$(O)/gen/grpc $<

$(call obj,$(BENCH_SRCS) $(BRIDGE_SRCS) $(GRPC_SRCS) $(PROTO_C) $(ETCDDB_SRCS)): ALL_CFLAGS += $(GRPC_CFLAGS)
$(call obj,$(BENCH_SRCS) $(BRIDGE_SRCS) $(GRPC_SRCS) $(ETCDDB_SRCS)): $(PROTO_C:.c=.h)
ETCDDB_OBJS := $(call obj,$(ETCDDB_SRCS) $(O)/gen/grpc/kv.pb-c.c $(O)/gen/grpc/lease.pb-c.c)

$(BINDIR)/ketch-bench: $(call obj,$(BENCH_SRCS) $(GRPC_SRCS) $(PROTO_C)) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS)

# The gRPC bridge (etcd's v3 API in front of ketch), tools/grpc-bridge/.
$(BINDIR)/ketch-grpc: $(call obj,$(BRIDGE_SRCS) tools/grpc/grpc_frame.c net/tls_reload.c $(PROTO_C) $(ETCDDB_SRCS)) $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS) $(ETCDDB_LIBS)

$(BINDIR)/ketchutl: $(call obj,$(KETCHUTL_SRCS)) $(ETCDDB_OBJS) $(LIBKT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS) $(ETCDDB_LIBS)

# Unit tests: one binary per test/unit/*_test.c, with the tiny runner.
$(O)/test/%_test: $(O)/obj/test/unit/%_test.o $(O)/obj/test/unit/test_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The operator's decision, spec and record tests link its pure files.
$(O)/test/operator_plan_test: $(call obj,$(OPERATOR_PURE_SRCS))
$(O)/test/fuzz/operator_spec_replay: $(call obj,$(OPERATOR_PURE_SRCS))

# Fuzz targets: replayed over their committed corpus in `make test`.
$(O)/test/fuzz/%_replay: $(O)/obj/test/fuzz/%_fuzz.o $(O)/obj/test/fuzz/replay_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The bridge's request decoder needs the generated protos and protobuf-c.
$(O)/obj/test/fuzz/grpc_bridge_fuzz.o: ALL_CFLAGS += $(GRPC_CFLAGS)
$(O)/obj/test/fuzz/grpc_bridge_fuzz.o: $(PROTO_C:.c=.h) $(PROTO_C)
$(O)/test/fuzz/grpc_bridge_replay: $(O)/obj/test/fuzz/grpc_bridge_fuzz.o $(O)/obj/test/fuzz/replay_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS) $(ETCDDB_LIBS)

# ketch-grpc's --namespace rewriter (bridge_ns.c), with protobuf-c.
$(O)/obj/test/fuzz/grpc_ns_fuzz.o: ALL_CFLAGS += $(GRPC_CFLAGS)
$(O)/obj/test/fuzz/grpc_ns_fuzz.o: $(PROTO_C:.c=.h) $(PROTO_C)
$(O)/test/fuzz/grpc_ns_replay: $(O)/obj/test/fuzz/grpc_ns_fuzz.o $(O)/obj/test/fuzz/replay_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS)

# ketch-grpc's range cache (bridge_cache.c): its index and rules, with protobuf-c.
$(O)/obj/test/fuzz/grpc_cache_fuzz.o: ALL_CFLAGS += $(GRPC_CFLAGS)
$(O)/obj/test/fuzz/grpc_cache_fuzz.o: $(PROTO_C:.c=.h) $(PROTO_C)
$(O)/test/fuzz/grpc_cache_replay: $(O)/obj/test/fuzz/grpc_cache_fuzz.o $(O)/obj/test/fuzz/replay_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS)

# etcd's schema decoder over arbitrary bbolt bytes (tools/etcddb), with protobuf-c.
$(O)/obj/test/fuzz/etcddb_fuzz.o: ALL_CFLAGS += $(GRPC_CFLAGS)
$(O)/obj/test/fuzz/etcddb_fuzz.o: $(PROTO_C:.c=.h) $(PROTO_C)
$(O)/test/fuzz/etcddb_replay: $(O)/obj/test/fuzz/etcddb_fuzz.o $(O)/obj/test/fuzz/replay_main.o $(LIBKT) $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GRPC_LIBS) $(ETCDDB_LIBS)

# C clients that integration tests run (test/integration/*.c), on libketch.
$(O)/test/integration/%: $(O)/obj/test/integration/%.o $(LIBDIR)/libketch.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The linearizability checker over a history real clients recorded
# (test/integration/fault_test.py).
$(O)/test/linz_check: $(O)/obj/test/sim/linz_check.o $(LIBKT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Real-process fault tests for as long as asked (seconds), varied seeds, 3
# and 5 members: make soak DURATION=3600 [SEED=S] [SOAK_IO_THREADS=N]. The
# members run with --io-threads 1 by default: client connections on an I/O
# thread and the peer links on ketch-peer (net/THREADS.md); 0: one thread.
DURATION ?= 600
SOAK_IO_THREADS ?= 1
soak: deps all $(O)/test/linz_check
	cd test/integration && KETCH_BIN=$(abspath $(BINDIR)) O=$(O) KT_FAULT_DURATION=$(DURATION) \
	  KT_IO_THREADS=$(SOAK_IO_THREADS) KT_FAULT_SEED=$${SEED:-$$(date +%s)} /usr/bin/python3 fault_test.py

# Micro-benchmarks of single modules (store apply rate, snapshot speed...).
$(O)/perf/%_perf: $(O)/obj/test/perf/%_perf.o $(LIBKT)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
perf: $(PERF_BINS)

# The deterministic cluster simulation over as many seeds as you give it.
SEEDS ?= 20000
sim-soak: $(O)/test/raft_sim_test
	KT_SIM_SEEDS=$(SEEDS) $(O)/test/raft_sim_test

# One seed, exactly as it ran (every configuration), with the trace.
sim: $(O)/test/raft_sim_test
	@test -n "$(SEED)" || { echo "usage: make sim SEED=S"; exit 2; }
	KT_SIM_SEED=$(SEED) KT_SIM_VERBOSE=1 $(O)/test/raft_sim_test

deps:
	@sh test/deps.sh

# The standard suite (a few minutes): ketch vs etcd, 1 member each, alternating
# rounds; writes bench/results.json, bench/table.md and bench/throughput.svg.
BENCH_WORKLOADS ?= put:1 put:16 put:64 put:256 put:64@10000 range-l:64 range-s:64 lease-keepalive:64 \
  watch-latency:100 watch:1000 lock:8
BENCH_WORKLOADS_3 ?= put:64 put:256 put:64@5000 range-l:64 range-s:64 lease-keepalive:64 watch-latency:100 lock:8
# Each of these over plaintext and over TLS, against the same servers (issue 15's figures).
BENCH_WORKLOADS_TLS ?= put:64 put:256 range-l:64 range-l:256 range-s:64 range-s:256
bench: deps all
	@sh test/deps.sh bench
	@mkdir -p bench
	$(BINDIR)/ketch-bench compare --rounds 3 --run-seconds 3 --keys 100000 --leases 100000 \
	  --resource-keys 1000000 --out-dir bench \
	  $(BENCH_WORKLOADS) > bench/table.md
	$(BINDIR)/ketch-bench compare --members 3 --rounds 3 --run-seconds 2 --keys 100000 \
	  --leases 100000 --out-dir bench/3members $(BENCH_WORKLOADS_3) >> bench/table.md
	$(BINDIR)/ketch-bench compare --tls --rounds 3 --run-seconds 3 --keys 100000 \
	  --out-dir bench/tls $(BENCH_WORKLOADS_TLS) >> bench/table.md
	@cat bench/table.md
	gnuplot -e "datafile='bench/results.dat'; outfile='bench/throughput.svg'; \
	  subtitle='$$(nproc) cores, $$(date -u +%Y-%m-%d)'" tools/bench/plot.gp

test: deps
	$(MAKE) all $(UNIT_BINS) $(FUZZ_REPLAYS) $(INTEG_BINS) $(O)/test/linz_check
	@O=$(O) BINDIR=$(BINDIR) SAN=$(SAN) sh test/run.sh

asan:
	$(MAKE) O=build/asan SAN=1 test

# ThreadSanitizer over the threaded server (--io-threads, net/THREADS.md):
# its ring's unit test, then integration tests whose every member runs with
# 4 I/O threads and every ketch-grpc with 3 event loops (grpc_loops_test:
# the bridge's threads); a race report in a member's or the bridge's log, or
# the bridge's exit status, fails its test (harness.py looks for "Sanitizer").
# cluster_test: 3 members, their Raft traffic between the members' peer
# threads (ketch-peer, net/THREADS.md "Peer links") and state threads while
# the I/O threads serve the clients; peerlink_test: the peer links' facade.
TSAN_TESTS ?= iothreads_test server_test server_watch_lease_test metrics_test watch_fanout_test \
  grpc_loops_test cluster_test
tsan: deps
	$(MAKE) O=build/tsan TSAN=1 all build/tsan/test/spsc_test build/tsan/test/peerlink_test build/tsan/test/wal_test
	@fail=0; build/tsan/test/spsc_test || fail=1; build/tsan/test/peerlink_test || fail=1; build/tsan/test/wal_test || fail=1; for t in $(TSAN_TESTS); do \
	  KETCH_BIN=$(abspath build/tsan/bin) KT_IO_THREADS=4 KT_IOTHREADS_RUN_S=3 KETCH_GRPC_LOOPS=3 \
	  TSAN_OPTIONS="halt_on_error=0 second_deadlock_stack=1" \
	  timeout 600 /usr/bin/python3 test/integration/$$t.py || fail=1; done; \
	if [ $$fail = 0 ]; then echo "tsan: clean"; else echo "tsan: FAILED"; exit 1; fi

run: deps all
	$(BINDIR)/ketch --data-dir default.ketch

F ?= wal_record
SECONDS ?= 60
fuzz: deps
	@sh test/deps.sh fuzz
	@mkdir -p build/fuzz
	$(MAKE) $(PROTO_C)
	clang -std=c11 -D_GNU_SOURCE -DKT_VERSION='"$(VERSION)"' -g -O1 -fsanitize=fuzzer,address,undefined $(shell pkg-config --cflags $(PKGS)) $(GRPC_CFLAGS) \
	  test/fuzz/$(F)_fuzz.c $(filter-out %_main.c,$(SERVER_SRCS)) $(filter-out client/example.c,$(wildcard client/*.c)) \
	  $(OPERATOR_PURE_SRCS) \
	  -o build/fuzz/$(F) $(LDLIBS) $(GRPC_LIBS) $(ETCDDB_LIBS)
	mkdir -p build/fuzz/$(F)-corpus
	build/fuzz/$(F) -max_total_time=$(SECONDS) build/fuzz/$(F)-corpus test/fuzz/corpus/$(F)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

# ---- installing (make install PREFIX=... DESTDIR=...) and the Debian package ----
# Man pages come from each program's --help (tools/man/mkman.sh) and
# tools/man/libketch.3. The installed libketch.so.$(VERSION) has the SONAME
# libketch.so.0 (the in-tree lib/libketch.so, which tests link, has none).
PREFIX ?= /usr/local
DESTDIR ?=
MAN_PAGES := $(foreach m,$(notdir $(BINS)),$(O)/man/$(m).1) $(O)/man/libketch.3
.PHONY: man install deb
man: $(MAN_PAGES)
$(O)/man/%.1: $(BINDIR)/% tools/man/mkman.sh
	@mkdir -p $(dir $@)
	VERSION=$(VERSION) sh tools/man/mkman.sh $< $* 1 > $@
$(O)/man/libketch.3: tools/man/libketch.3
	@mkdir -p $(dir $@)
	cp $< $@
$(O)/libketch.so.$(VERSION): $(CLIENT_OBJS) client/ketch.map
	$(CC) -shared -Wl,-soname,libketch.so.0 -Wl,--version-script=client/ketch.map -o $@ $(CLIENT_OBJS) \
	  $(LDFLAGS) $(shell pkg-config --libs $(LIBKETCH_PKGS) 2>/dev/null) -lpthread

install: all man $(O)/libketch.so.$(VERSION)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
	  $(DESTDIR)$(PREFIX)/share/doc/ketch/examples
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(O)/libketch.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libketch.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libketch.so.0
	ln -sf libketch.so.0 $(DESTDIR)$(PREFIX)/lib/libketch.so
	install -m 0644 $(LIBDIR)/libketch.a $(DESTDIR)$(PREFIX)/lib/
	install -m 0644 client/ketch.h $(DESTDIR)$(PREFIX)/include/
	printf 'prefix=%s\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\nName: ketch\nDescription: C client library for the ketch key-value store\nVersion: $(VERSION)\nRequires.private: $(LIBKETCH_PKGS)\nLibs: -L$${libdir} -lketch\nCflags: -I$${includedir}\n' "$(PREFIX)" > $(DESTDIR)$(PREFIX)/lib/pkgconfig/ketch.pc
	install -m 0644 $(filter %.1,$(MAN_PAGES)) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 $(O)/man/libketch.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/ketch/
	install -m 0644 contrib/systemd/* contrib/prometheus/* contrib/grafana/* \
	  $(DESTDIR)$(PREFIX)/share/doc/ketch/examples/

# A Debian package of all of it (PREFIX=/usr, the units, /etc/default/ketch,
# the ketch user): $(O)/ketch_$(VERSION)_<arch>.deb. tools/deb/build.sh.
deb: all man $(O)/libketch.so.$(VERSION)
	O=$(O) VERSION=$(VERSION) sh tools/deb/build.sh

clean:
	rm -rf build bin lib

-include $(shell find $(O)/obj -name '*.d' 2>/dev/null)
