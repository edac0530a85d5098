# The two entry points from the README. Each one installs what is missing, configures, builds,
# then runs the main job (`make train`) or the whole test suite (`make test`).
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build train test bench clean check-sanitize check-tsan fuzz

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: the small CNN on Fashion-MNIST (examples/fashion_cnn.toml), a few minutes on two
# cores, ending with its test accuracy (>= 90%); checkpoint and metrics go to runs/fashion_cnn/.
train: build
	./$(BUILD)/tessel train examples/fashion_cnn.toml

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Checks outside `make test` (they take long): the whole suite under ASan + UBSan, the threaded
# parts under TSan, and the libFuzzer targets. Each has its own build folder. (Warnings are not
# errors there: sanitizer instrumentation makes GCC warn about code that is fine.)
# They compile the ahead-of-time CPU kernels for this machine's variant only (TESSEL_AOT_ISAS=host):
# the other three variants are a third of the build and these builds never run elsewhere; and at
# -O1 (TESSEL_AOT_OPT): a flash-attention kernel took 1.8 s of CPU at -O1 with ASan + UBSan, and
# more than 11 s at -O3 (not finished when measured).
SANITIZE_BUILD ?= build-sanitize
TSAN_BUILD     ?= build-tsan
FUZZ_BUILD     ?= build-fuzz
FUZZ_SECONDS   ?= 60
SANITIZE_FLAGS  = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
TSAN_FLAGS      = -fsanitize=thread -fno-omit-frame-pointer
# -O1 with line tables only: the usual setting for sanitizer builds, and about half the compile
# time of RelWithDebInfo's -O2 -g, which matters on two cores (the builds are the long part).
SANITIZE_OPT   ?= -O1 -g1 -DNDEBUG
# The thread pool, the collectives (ranks as threads, where TSan sees both sides; the tests with
# ranks as processes only run slower under it) and data-parallel training.
TSAN_TARGETS    = tessel_support_tests tessel_dist_tests tessel_parallel_tests
TSAN_TESTS      = ThreadPool|CommThreads|ProcessGroup|Faults|DataParallel
# intercept_tls_get_addr=0: with it on, GCC 12's LeakSanitizer reads glibc 2.36's table of dynamic
# TLS blocks wrongly once PoCL has loaded LLVM (a block "at 0x30000048a-0x33000158c") and its
# scan dies with "Tracer caught signal 11" after the test passed; off, leaks are still found.
# use_sigaltstack=0: LLVM (loaded by PoCL) replaces a thread's signal stack with one from malloc,
# and ASan's own at thread exit then tries to munmap that heap block and dies ("unable to unmap").
# allocator_may_return_null: an allocation that cannot be satisfied returns null, as it does
# without a sanitizer, so that the tests of out-of-memory errors see the error, not a report.
sanitizer_env   = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:allocator_may_return_null=1:use_sigaltstack=0 \
                  LSAN_OPTIONS=suppressions=$(CURDIR)/tools/sanitize/lsan.supp:intercept_tls_get_addr=0 \
                  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1:suppressions=$(CURDIR)/tools/sanitize/tsan.supp

check-sanitize: setup
	@cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSEL_WERROR=OFF -DTESSEL_AOT_ISAS=host -DTESSEL_AOT_OPT=-O1 $(CMAKE_FLAGS) \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" \
	  "-DCMAKE_C_FLAGS=$(SANITIZE_FLAGS)" "-DCMAKE_CXX_FLAGS=$(SANITIZE_FLAGS)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(SANITIZE_FLAGS)" "-DCMAKE_SHARED_LINKER_FLAGS=$(SANITIZE_FLAGS)" > /dev/null
	@cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	$(sanitizer_env) ctest --test-dir $(SANITIZE_BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

check-tsan: setup
	@cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSEL_WERROR=OFF -DTESSEL_AOT_ISAS=host -DTESSEL_AOT_OPT=-O1 $(CMAKE_FLAGS) \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SANITIZE_OPT)" \
	  "-DCMAKE_C_FLAGS=$(TSAN_FLAGS)" "-DCMAKE_CXX_FLAGS=$(TSAN_FLAGS)" \
	  "-DCMAKE_EXE_LINKER_FLAGS=$(TSAN_FLAGS)" "-DCMAKE_SHARED_LINKER_FLAGS=$(TSAN_FLAGS)" > /dev/null
	@cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TARGETS) tessel_dist_rank_helper
	$(sanitizer_env) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)'

# libFuzzer targets (tools/fuzz): libtessel and the targets built by clang 15 with ASan + UBSan
# (clang 14 lacks the std::source_location that libstdc++ 12 needs), each target run FUZZ_SECONDS
# from its seed corpus; a crash leaves crash-* in $(FUZZ_BUILD) and fails the target. FUZZ_TARGETS
# picks some. (`make test` replays the same targets over their corpora, built by the usual
# compiler: the FuzzCorpus.* tests.)
FUZZ_TARGETS ?= fuzz_tile fuzz_config fuzz_safetensors fuzz_data
fuzz:
	@for p in clang-15 libclang-common-15-dev; do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then apt-get install -y --no-install-recommends $$missing; fi
	@CC=clang-15 CXX=clang++-15 cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTESSEL_FUZZ=ON -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_CLI=OFF -DTESSEL_WERROR=OFF > /dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)
	@for t in $(FUZZ_TARGETS); do \
	  seeds=$(CURDIR)/tools/fuzz/corpus/$$t; \
	  [ $$t = fuzz_tile ] && seeds="$$seeds $(CURDIR)/kernels"; \
	  [ $$t = fuzz_config ] && seeds="$$seeds $(CURDIR)/examples"; \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t && \
	  (cd $(FUZZ_BUILD) && ./tools/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	     corpus/$$t $$seeds) || exit 1; \
	done

clean:
	rm -rf $(BUILD)
