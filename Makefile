# The two entry points from the README. Each one installs what is missing, configures, builds,
# then runs the main job (`make train`) or the whole test suite (`make test`).
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: setup configure build train test bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job. Until the trainer exists it shows what tessel found on this machine.
train: build
	./$(BUILD)/tessel info

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
