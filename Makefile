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

# The main job: the small CNN on Fashion-MNIST (examples/fashion_cnn.toml), a few minutes on two
# cores, ending with its test accuracy (>= 90%); checkpoint and metrics go to runs/fashion_cnn/.
train: build
	./$(BUILD)/tessel train examples/fashion_cnn.toml

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
