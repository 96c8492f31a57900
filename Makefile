# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# rdmacm-mux: `make` builds everything, `make check` runs every test.
# `make SAN=1 ...` builds with AddressSanitizer and UBSan into build-san/,
# `make TSAN=1 ...` with ThreadSanitizer into build-tsan/.

VERSION    := 0.1.0
SOVERSION  := 0
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SBINDIR    ?= $(PREFIX)/sbin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR     ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SYSCONFDIR ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR     ?= $(PREFIX)/share/doc/rdmacm-mux
DESTDIR    ?=

CC      ?= cc
CFLAGS  ?= -O2 -g
WARNINGS := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wmissing-prototypes \
	    -Wmissing-declarations -Wwrite-strings -Wno-missing-field-initializers
CPPFLAGS_ALL := -std=c11 -D_GNU_SOURCE -I. $(WARNINGS) -pthread
PKG_LIBS := libevent libevent_pthreads jansson
DEP_CFLAGS := $(shell pkg-config --cflags $(PKG_LIBS))
DEP_LIBS   := $(shell pkg-config --libs $(PKG_LIBS))
# libmnl: RDMA netlink, through which the kernel says whose a QP is
# (iproute2's rdma tool speaks it with the same library).
RDMA_LIBS  := -libumad -libverbs $(shell pkg-config --libs libmnl)

ifeq ($(SAN),1)
B := build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(TSAN),1)
# ThreadSanitizer for the multithreaded daemon (clang's runtime).
B := build-tsan
CC := clang
SANFLAGS := -fsanitize=thread -O1
else
B := build
SANFLAGS :=
endif

ALL_CFLAGS = $(CPPFLAGS_ALL) $(CPPFLAGS) $(DEP_CFLAGS) $(CFLAGS) $(SANFLAGS) -fPIC -MMD -MP
LDFLAGS_ALL = $(LDFLAGS) $(SANFLAGS) -pthread

COMMON_SRC   := common/log.c common/text.c common/unix_socket.c common/gid.c common/gid_map.c \
		common/cm_mad.c common/hset.c common/json_file.c common/number.c
# The GID table through libibverbs: the daemon's and the library's, not
# the CLI's or the tests' (which do not link libibverbs).
IBDEV_SRC    := common/ibdev.c
PROTOCOL_SRC := protocol/frame.c protocol/mad_frame.c protocol/control.c protocol/status_query.c \
		protocol/capture_request.c
QEMU_MSG_SRC := protocol/qemu_msg.c
# The connection table: a unit with no dependency on the daemon.
CONN_SRC     := mux/conn.c mux/conn_table.c mux/conn_restore.c mux/conn_store.c
MUXD_SRC     := mux/main.c mux/config.c mux/mux.c mux/worker.c mux/delivery.c mux/session.c mux/outlet.c mux/port_senders.c mux/requests.c mux/outbound.c mux/qemu_client.c \
		mux/router.c $(CONN_SRC) mux/clients.c mux/stats.c mux/port.c mux/port_answers.c mux/port_parked.c \
		mux/port_sim.c mux/port_umad.c mux/port_ud.c mux/unix_listener.c mux/lockfile.c mux/sdnotify.c mux/listen_fds.c mux/listener.c \
		mux/status.c mux/policy.c mux/admin.c mux/capture.c mux/qp_owner.c mux/neigh_nl.c mux/qp_registry.c $(IBDEV_SRC) $(QEMU_MSG_SRC)
MUXCTL_SRC   := mux/ctl/muxctl.c mux/ctl/muxctl_status.c mux/ctl/muxctl_metrics.c mux/ctl/muxctl_top.c \
		mux/ctl/muxctl_capture.c mux/ctl/muxctl_pcapng.c
BACKEND_SRC  := backend/muxbe.c backend/verbs.c backend/ah_cache.c $(IBDEV_SRC)
VM_SRC       := backend/vm/vm.c backend/vm/guest_cm.c backend/vm/vm_data.c
# librdmacm's API for the host's own processes, on libmuxbe.
RDMACM_SRC   := backend/rdmacm/lib.c backend/rdmacm/channel.c backend/rdmacm/id.c \
		backend/rdmacm/addr.c backend/rdmacm/conn.c backend/rdmacm/cep.c backend/rdmacm/qp.c \
		backend/rdmacm/sidr.c backend/rdmacm/ep.c backend/rdmacm/unsupported.c

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

COMMON_OBJ   := $(call obj,$(COMMON_SRC))
PROTOCOL_OBJ := $(call obj,$(PROTOCOL_SRC))
MUXD_OBJ     := $(call obj,$(MUXD_SRC))
CONN_OBJ     := $(call obj,$(CONN_SRC))
BACKEND_OBJ  := $(call obj,$(BACKEND_SRC))
VM_OBJ       := $(call obj,$(VM_SRC))
RDMACM_OBJ   := $(call obj,$(RDMACM_SRC))

MUXD    := $(B)/rdmacm-muxd
MUXCTL  := $(B)/rdmacm-muxctl
VMPROG  := $(B)/rdmacm-mux-vm
LIBA    := $(B)/libmuxbe.a
LIBSO   := $(B)/libmuxbe.so.$(SOVERSION)
PCFILE  := $(B)/muxbe.pc
RDMACM_SOVERSION := 1
RDMACMLIB := $(B)/librdmacm-mux.so.$(RDMACM_SOVERSION)
RUNPROG := $(B)/rdmacm-mux-run

UNIT_TESTS := test_codec test_cm_mad test_router test_conn test_conn_table test_conn_restore test_policy test_guest_cm \
	      test_qemu_msg test_text test_gid_map test_hset test_outlet test_port_senders test_port_parked \
	      test_number test_cep
UNIT_BINS  := $(addprefix $(B)/tests/,$(UNIT_TESTS))
INTEG_TESTS := test_admission test_status test_service test_cm test_attacks test_attacks_files \
	       test_attacks_qps test_qemu test_isolation test_muxbe_recv test_capture \
	       test_shared_gid test_rdmacm
INTEG_BINS := $(addprefix $(B)/tests/,$(INTEG_TESTS))


.PHONY: soak
.PHONY: print-unit-tests print-integration-tests print-fuzz-targets check-house check-format check-units bench bench-capture bench-lab check-lab check-conformance all clean check check-quick check-unit \
	demo install uninstall dist distcheck deb fuzz tests
UNITS   := $(B)/systemd/rdmacm-muxd.service $(B)/systemd/rdmacm-muxd.socket
EXAMPLE := $(B)/example/device_model

all: $(MUXD) $(MUXCTL) $(LIBA) $(LIBSO) $(PCFILE) $(VMPROG) $(UNITS) $(EXAMPLE) $(RDMACMLIB) $(RUNPROG)

# muxbe(3)'s minimal device model, linked as an integrator would.
$(EXAMPLE): $(B)/obj/backend/example/device_model.o $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(shell pkg-config --libs jansson) -libverbs

# The paths built into the units and muxbe.pc: when one changes (`make
# install PREFIX=/usr` after a plain `make`), they are made again, so
# that install copies what was built and generates nothing of its own.
PATH_VARS := $(PREFIX)|$(SBINDIR)|$(SYSCONFDIR)|$(LIBDIR)|$(INCLUDEDIR)|$(VERSION)
$(B)/path-vars: FORCE
	@mkdir -p $(dir $@)
	@echo '$(PATH_VARS)' | cmp -s - $@ || echo '$(PATH_VARS)' > $@
.PHONY: FORCE
FORCE:

# systemd units, for SBINDIR and SYSCONFDIR.
$(B)/systemd/%: mux/%.in $(B)/path-vars
	@mkdir -p $(dir $@)
	sed -e 's|@SBINDIR@|$(SBINDIR)|' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|' $< > $@

# `systemd-analyze verify` on the units as they would run this build's
# daemon; any word from it (a warning too) fails.
check-units: $(MUXD)
	@rm -rf $(B)/units-check && mkdir -p $(B)/units-check
	sed -e 's|@SBINDIR@|$(abspath $(B))|' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|' \
		mux/rdmacm-muxd.service.in > $(B)/units-check/rdmacm-muxd.service
	cp mux/rdmacm-muxd.socket.in $(B)/units-check/rdmacm-muxd.socket
	@out=$$(cd $(B)/units-check && systemd-analyze verify --man=no \
		rdmacm-muxd.service rdmacm-muxd.socket 2>&1); \
	if [ -n "$$out" ]; then echo "$$out"; echo "units: 0 passed, 1 failed"; exit 1; fi; \
	echo "units: 1 passed, 0 failed"

# The suites, for scripts/check.sh to run.
print-unit-tests:
	@echo $(UNIT_TESTS)
print-integration-tests:
	@echo $(INTEG_TESTS)
print-fuzz-targets:
	@echo $(FUZZ_TARGETS)

# House rules a compiler does not check (scripts/check-house.sh).
check-house:
	@scripts/check-house.sh

# The written style (.clang-format): any deviation fails.
check-format:
	@out=$$(if [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ]; then \
		git ls-files '*.c' '*.h'; else find mux backend common protocol tests -name '*.[ch]'; fi); \
	if clang-format --dry-run --Werror --style=file $$out 2>&1 | head -n 40 | grep .; then \
		echo "format: 0 passed, 1 failed (clang-format -i FILE fixes it)"; exit 1; fi; \
	echo "format: 1 passed, 0 failed"

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(MUXD): $(MUXD_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(DEP_LIBS) $(RDMA_LIBS)

$(MUXCTL): $(call obj,$(MUXCTL_SRC)) $(COMMON_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(DEP_LIBS)

# The library carries its own copy of the codec so that it has no
# dependency on anything but libc, jansson and pthreads.
$(LIBA): $(BACKEND_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSO): $(BACKEND_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ) backend/muxbe.map
	$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libmuxbe.so.$(SOVERSION) \
		-Wl,--version-script=backend/muxbe.map -o $@ \
		$(BACKEND_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ) $(shell pkg-config --libs jansson) -libverbs
	ln -sf libmuxbe.so.$(SOVERSION) $(B)/libmuxbe.so

$(PCFILE): backend/muxbe.pc.in $(B)/path-vars
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' $< > $@

# librdmacm-mux: the stock librdmacm's version nodes (a preloaded
# definition must carry the version a binary asks for), -Bsymbolic so
# that its own calls stay inside it.
$(RDMACMLIB): $(RDMACM_OBJ) $(BACKEND_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ) backend/rdmacm/rdmacm-mux.map
	$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,librdmacm-mux.so.$(RDMACM_SOVERSION) -Wl,-Bsymbolic \
		-Wl,--version-script=backend/rdmacm/rdmacm-mux.map -o $@ \
		$(RDMACM_OBJ) $(BACKEND_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ) $(shell pkg-config --libs jansson) -libverbs

$(RUNPROG): backend/rdmacm/rdmacm-mux-run.in $(B)/path-vars
	@mkdir -p $(dir $@)
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' $< > $@
	chmod 0755 $@

$(VMPROG): $(VM_OBJ) $(LIBA)
	$(CC) $(LDFLAGS_ALL) -o $@ $(VM_OBJ) $(LIBA) $(DEP_LIBS) -libverbs

# ---- tests ---------------------------------------------------------------
TEST_LIBS := $(shell pkg-config --libs cmocka) $(DEP_LIBS)

# A unit suite is its own object and the objects of what it tests.
$(UNIT_BINS): $(B)/tests/%: $(B)/obj/tests/unit/%.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(TEST_LIBS)
$(B)/tests/test_codec: $(PROTOCOL_OBJ) $(COMMON_OBJ)
$(B)/tests/test_qemu_msg: $(call obj,$(QEMU_MSG_SRC))
$(B)/tests/test_text $(B)/tests/test_gid_map $(B)/tests/test_hset \
	$(B)/tests/test_cm_mad $(B)/tests/test_number: $(COMMON_OBJ)
$(B)/tests/test_outlet: $(B)/obj/mux/outlet.o
# It acts while a write is under way, from inside send().
$(B)/tests/test_outlet: LDFLAGS_ALL += -Wl,--wrap=send
$(B)/tests/test_port_senders: $(B)/obj/mux/port_senders.o $(COMMON_OBJ)
$(B)/tests/test_port_parked: $(B)/obj/mux/port_senders.o $(B)/obj/mux/port_parked.o $(COMMON_OBJ)
$(B)/tests/test_router: $(B)/obj/mux/router.o $(CONN_OBJ) $(COMMON_OBJ)
# The connection table's three suites share a fixture (a fake clock, a
# peer, the table's own MADs).
$(B)/tests/test_conn $(B)/tests/test_conn_table $(B)/tests/test_conn_restore: \
	$(B)/obj/tests/unit/conn_fixture.o $(CONN_OBJ) $(COMMON_OBJ)
$(B)/tests/test_policy: $(B)/obj/mux/policy.o $(COMMON_OBJ)
$(B)/tests/test_guest_cm: $(B)/obj/backend/vm/guest_cm.o $(COMMON_OBJ)
$(B)/tests/test_cep: $(B)/obj/backend/rdmacm/cep.o $(COMMON_OBJ)

# An integration suite drives the real daemon through the harness and
# libmuxbe; verbs_selftest, the lab's, is one too.
# A QP the test process owns, for the REQs and REPs the daemon sends
# only for their QP's owner.
OWN_QP_OBJ := $(B)/obj/tests/lib/own_qp.o
# The daemon's status document, for the programs that read its counters.
STATUS_QUERY_OBJ := $(B)/obj/tests/lib/status_query.o
# The daemon's memory, CPU and descriptors, from /proc.
PROC_FIGURES_OBJ := $(B)/obj/tests/lib/proc_figures.o
HARNESS_OBJ := $(B)/obj/tests/integration/harness.o $(OWN_QP_OBJ)
$(INTEG_BINS): $(B)/tests/%: $(B)/obj/tests/integration/%.o $(HARNESS_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(TEST_LIBS) -libverbs $(TEST_EXTRA_LIBS)
$(B)/tests/test_qemu: $(call obj,$(QEMU_MSG_SRC))
# librdmacm's API as a program links it, from the build tree.
$(B)/tests/test_rdmacm: $(RDMACMLIB)
$(B)/tests/test_rdmacm: TEST_EXTRA_LIBS = $(abspath $(RDMACMLIB)) -Wl,-rpath,$(abspath $(B))
$(B)/tests/test_service: $(PROC_FIGURES_OBJ)
# It fails the library's allocations it means to (its calloc() wrapped).
$(B)/tests/test_muxbe_recv: LDFLAGS_ALL += -Wl,--wrap=calloc
$(B)/tests/verbs_selftest: $(B)/obj/tests/e2e/verbs_selftest.o $(HARNESS_OBJ) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(TEST_LIBS) -libverbs

# The lab's tools: a raw MAD sender, and the connection-rate benchmark of
# the kernel's rdma_cm (librdmacm, the peer side) and of a VM through the
# daemon (libmuxbe and the guest CM).
E2E_BINS := $(B)/tests/verbs_selftest $(B)/tests/mad_send $(B)/bench/cm_rate \
	    $(B)/bench/cm_rate_vm $(B)/tests/rdma_hold $(B)/tests/cm_peer $(B)/tests/cm_app
$(B)/bench/cm_rate: $(B)/obj/tests/bench/cm_rate.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ -lrdmacm -libverbs
# One connection held across daemon restarts, in the pvrdma guest too.
$(B)/tests/rdma_hold: $(B)/obj/tests/e2e/rdma_hold.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ -lrdmacm -libverbs
# The conformance run: a raw CM peer on umad, and the application side
# (librdmacm) of each case, on a host and in the pvrdma guest.
$(B)/tests/cm_peer: $(B)/obj/tests/conformance/cm_peer.o $(call obj,common/cm_mad.c common/gid.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ -libumad -lm
$(B)/tests/cm_app: $(B)/obj/tests/conformance/cm_app.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ -lrdmacm -libverbs
$(B)/tests/mad_send $(B)/bench/cm_rate_vm: $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(DEP_LIBS) -libverbs
$(B)/tests/mad_send: $(B)/obj/tests/e2e/mad_send.o $(OWN_QP_OBJ)
$(B)/bench/cm_rate_vm: $(B)/obj/tests/bench/cm_rate_vm.o $(B)/obj/backend/vm/guest_cm.o

# The unit suites alone (the Debian build's test step).
check-unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

tests: $(UNIT_BINS) $(INTEG_BINS) $(E2E_BINS) $(B)/bench/bench_conn $(B)/bench/bench_relay $(B)/bench/rdmacm-muxd-notaps \
	$(B)/soak/soak

# Everything: normal build, ASan+UBSan build, valgrind, libFuzzer smoke.
check:
	scripts/check.sh

check-quick:
	scripts/check.sh --quick

# The real kernel: soft-RoCE in QEMU VMs, stock rdma-core peers.
check-lab: all tests
	tests/e2e/run.sh

# The conformance run alone (the kernel CM as the judge; part of check-lab).
check-conformance: all tests
	tests/e2e/run.sh 24-conformance

# The lab benchmark at full size (see tests/e2e/scenarios/21-lab-benchmark.sh).
bench-lab: all tests
	LAB_BENCH=full tests/e2e/run.sh 21-lab-benchmark

# ---- fuzzing (clang's libFuzzer) -----------------------------------------
FUZZ_TARGETS := fuzz_frame fuzz_control fuzz_cm_mad fuzz_qemu_msg fuzz_policy fuzz_config fuzz_text \
		fuzz_status_query fuzz_capture_request fuzz_capture_record
FUZZ_SECONDS ?= 20
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -I. -g -O1 -fsanitize=fuzzer,address,undefined $(DEP_CFLAGS)
FUZZ_LINK := $(PROTOCOL_SRC) $(QEMU_MSG_SRC) $(COMMON_SRC) mux/router.c $(CONN_SRC) \
	     mux/policy.c mux/config.c backend/vm/guest_cm.c backend/rdmacm/cep.c \
	     mux/ctl/muxctl_capture.c mux/ctl/muxctl_pcapng.c mux/ctl/muxctl_status.c
$(B)/fuzz/%: tests/fuzz/%.c $(FUZZ_LINK)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -o $@ $< $(FUZZ_LINK) $(DEP_LIBS)

# Every target for FUZZ_SECONDS each, on its corpus and its seeds (which
# keep every input that ever crashed one); one "fuzz: TARGET executions N"
# line per target.
fuzz: $(addprefix $(B)/fuzz/,$(FUZZ_TARGETS))
	@set -e; for t in $(FUZZ_TARGETS); do mkdir -p $(B)/fuzz/corpus-$$t; \
		echo "== $$t ($(FUZZ_SECONDS)s)"; \
		$(B)/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
			$(B)/fuzz/corpus-$$t tests/fuzz/seeds/$$t 2>$(B)/fuzz/$$t.log || \
			{ tail -n 30 $(B)/fuzz/$$t.log; exit 1; }; \
		echo "fuzz: $$t executions $$(sed -n 's/^stat::number_of_executed_units: *//p' \
			$(B)/fuzz/$$t.log)"; done

# ---- benchmarks ------------------------------------------------------------
$(B)/bench/bench_conn: $(B)/obj/tests/bench/bench_conn.o $(CONN_OBJ) \
		 $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(DEP_LIBS)

$(B)/bench/bench_relay: $(B)/obj/tests/bench/bench_relay.o $(B)/obj/tests/bench/bench_capture.o $(B)/obj/tests/bench/bench_figures.o $(B)/obj/tests/bench/bench_daemon.o $(B)/obj/tests/bench/relay.o $(B)/obj/tests/bench/round_trip.o $(B)/obj/tests/bench/umad_relay.o $(OWN_QP_OBJ) $(STATUS_QUERY_OBJ) $(PROC_FIGURES_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(DEP_LIBS) -libumad -libverbs

# The connection table at 1,000,000 entries, then the daemon against a
# minimal relay (BENCH_ARGS, e.g. --json or --pairs 1,64).
bench: $(B)/bench/bench_conn $(B)/bench/bench_relay $(MUXD)
	$(B)/bench/bench_conn
	RDMACM_MUXD=$(abspath $(MUXD)) $(B)/bench/bench_relay $(BENCH_ARGS)

# The daemon without its capture taps (capture_on() compiled to 0 in the
# files that call it), the baseline of bench-capture.
TAPS_SRC := $(shell grep -lw capture_on $(MUXD_SRC))
NOTAPS_OBJ := $(patsubst %.c,$(B)/obj-notaps/%.o,$(TAPS_SRC))
$(B)/obj-notaps/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -DMUX_NO_CAPTURE_TAPS -c -o $@ $<
$(B)/bench/rdmacm-muxd-notaps: $(filter-out $(call obj,$(TAPS_SRC)),$(MUXD_OBJ)) \
		$(NOTAPS_OBJ) $(PROTOCOL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(DEP_LIBS) $(RDMA_LIBS)

# What the capture costs (rdmacm-muxd(8): nothing while none runs): the
# daemon against itself without taps, then with a capture of every MAD
# running against none (BENCH_ARGS as for bench).
bench-capture: $(B)/bench/bench_relay $(B)/bench/rdmacm-muxd-notaps $(MUXD)
	$(B)/bench/bench_relay --daemon $(abspath $(MUXD)) \
		--against $(abspath $(B)/bench/rdmacm-muxd-notaps) --mappings none $(BENCH_ARGS)
	$(B)/bench/bench_relay --daemon $(abspath $(MUXD)) --capture \
		--against $(abspath $(MUXD)) --mappings none $(BENCH_ARGS)

# ---- soak ------------------------------------------------------------------
# 1,000 clients, churn, crashes and a daemon restart for SOAK_SECONDS.
SOAK_SECONDS ?= 600
$(B)/soak/soak: $(B)/obj/tests/soak/soak.o $(OWN_QP_OBJ) $(STATUS_QUERY_OBJ) $(PROC_FIGURES_OBJ) $(call obj,$(QEMU_MSG_SRC)) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBA) $(DEP_LIBS) -libverbs

soak: $(B)/soak/soak $(MUXD)
	SOAK_SECONDS=$(SOAK_SECONDS) RDMACM_MUXD=$(abspath $(MUXD)) $(B)/soak/soak

# ---- demo and install ----------------------------------------------------
demo: all
	scripts/demo.sh --build-dir $(B)

MAN1 := $(notdir $(wildcard man/*.1))
MAN3 := $(notdir $(wildcard man/*.3))
MAN5 := $(notdir $(wildcard man/*.5))
MAN7 := $(notdir $(wildcard man/*.7))
MAN8 := $(notdir $(wildcard man/*.8))
HEADERS := backend/muxbe.h backend/muxbe_verbs.h protocol/rdmacm_mux_proto.h
EXAMPLES := mux/rdmacm-muxd.conf.example mux/policy.json.example backend/example/device_model.c

install: all
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) \
		$(DESTDIR)$(INCLUDEDIR)/rdmacm-mux $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(MANDIR)/man7 \
		$(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(DOCDIR)/examples
	install -m 0755 $(MUXD) $(DESTDIR)$(SBINDIR)/rdmacm-muxd
	install -m 0755 $(MUXCTL) $(DESTDIR)$(BINDIR)/rdmacm-muxctl
	install -m 0755 $(VMPROG) $(DESTDIR)$(BINDIR)/rdmacm-mux-vm
	install -m 0755 $(RUNPROG) $(DESTDIR)$(BINDIR)/rdmacm-mux-run
	install -m 0644 $(RDMACMLIB) $(DESTDIR)$(LIBDIR)/librdmacm-mux.so.$(RDMACM_SOVERSION)
	install -m 0644 $(LIBA) $(DESTDIR)$(LIBDIR)/libmuxbe.a
	install -m 0644 $(LIBSO) $(DESTDIR)$(LIBDIR)/libmuxbe.so.$(SOVERSION)
	ln -sf libmuxbe.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libmuxbe.so
	install -m 0644 $(HEADERS) $(DESTDIR)$(INCLUDEDIR)/rdmacm-mux/
	install -m 0644 $(PCFILE) $(DESTDIR)$(PKGCONFIGDIR)/muxbe.pc
	install -m 0644 $(addprefix man/,$(MAN1)) $(DESTDIR)$(MANDIR)/man1/
	install -m 0644 $(addprefix man/,$(MAN3)) $(DESTDIR)$(MANDIR)/man3/
	install -m 0644 $(addprefix man/,$(MAN5)) $(DESTDIR)$(MANDIR)/man5/
	install -m 0644 $(addprefix man/,$(MAN7)) $(DESTDIR)$(MANDIR)/man7/
	install -m 0644 $(addprefix man/,$(MAN8)) $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 $(UNITS) $(DESTDIR)$(SYSTEMDUNITDIR)/
	install -m 0644 $(EXAMPLES) $(DESTDIR)$(DOCDIR)/examples/

# What install made, and the directories it made that are left empty.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/rdmacm-muxd $(DESTDIR)$(BINDIR)/rdmacm-muxctl \
		$(DESTDIR)$(BINDIR)/rdmacm-mux-vm $(DESTDIR)$(LIBDIR)/libmuxbe.a \
		$(DESTDIR)$(BINDIR)/rdmacm-mux-run \
		$(DESTDIR)$(LIBDIR)/librdmacm-mux.so.$(RDMACM_SOVERSION) \
		$(DESTDIR)$(LIBDIR)/libmuxbe.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libmuxbe.so \
		$(addprefix $(DESTDIR)$(INCLUDEDIR)/rdmacm-mux/,$(notdir $(HEADERS))) \
		$(DESTDIR)$(PKGCONFIGDIR)/muxbe.pc \
		$(addprefix $(DESTDIR)$(MANDIR)/man1/,$(MAN1)) \
		$(addprefix $(DESTDIR)$(MANDIR)/man3/,$(MAN3)) \
		$(addprefix $(DESTDIR)$(MANDIR)/man5/,$(MAN5)) \
		$(addprefix $(DESTDIR)$(MANDIR)/man7/,$(MAN7)) \
		$(addprefix $(DESTDIR)$(MANDIR)/man8/,$(MAN8)) \
		$(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(notdir $(UNITS))) \
		$(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(notdir $(EXAMPLES)))
	-rmdir $(DESTDIR)$(INCLUDEDIR)/rdmacm-mux $(DESTDIR)$(DOCDIR)/examples \
		$(DESTDIR)$(DOCDIR) 2>/dev/null

# ---- release ---------------------------------------------------------------
# The tarball holds exactly the files git tracks (as they are in the work
# tree); `make distcheck` runs the whole `make check` inside it.
DIST := rdmacm-mux-$(VERSION)
dist:
	@test "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" || \
		{ echo "dist: $(CURDIR) is not the top of a git checkout"; exit 1; }
	@mkdir -p $(B)
	git ls-files -z | tar --null -T - --transform 's|^|$(DIST)/|' \
		--owner=0 --group=0 --sort=name -czf $(B)/$(DIST).tar.gz
	@echo "dist: $(B)/$(DIST).tar.gz ($$(git ls-files | wc -l) files)"

distcheck: dist deb
	rm -rf $(B)/distcheck && mkdir -p $(B)/distcheck
	tar -C $(B)/distcheck -xzf $(B)/$(DIST).tar.gz
	$(MAKE) -C $(B)/distcheck/$(DIST) check

# Debian packages (rdmacm-muxd, libmuxbe0, libmuxbe-dev) from the release
# tarball, with dpkg-buildpackage, then lintian on them.
deb: dist
	rm -rf $(B)/deb && mkdir -p $(B)/deb
	tar -C $(B)/deb -xzf $(B)/$(DIST).tar.gz
	cd $(B)/deb/$(DIST) && dpkg-buildpackage -us -uc -b >../build.log 2>&1 || \
		{ tail -n 40 $(abspath $(B))/deb/build.log; exit 1; }
	lintian --fail-on error $(B)/deb/*.changes
	@ls $(B)/deb/*.deb

clean:
	rm -rf build build-san build-tsan

-include $(shell find $(B)/obj $(B)/obj-notaps -name '*.d' 2>/dev/null)
