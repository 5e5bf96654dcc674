# ringside: the two commands.
#   make demo   install deps, build (Release), compare every strategy on 4 local ranks with the references,
#               write their timeline to out/demo.trace.json (with its metrics), measure the default
#               layer's speed on this machine (bench layer, beside PyTorch eager where a python3
#               with torch is present), and open the timeline in ringside-viewer (or, with no
#               display, draw it to out/demo.png)
#   make test   install deps, build (Release), run every test (ctest)
# Extra: make bench (kernel benchmarks), make clean. BUILD_DIR and CMAKE_FLAGS can be overridden.

BUILD_DIR   ?= build
CMAKE_FLAGS ?=
JOBS        ?= $(shell nproc)
# The demo's picture frames every group's layer (forward + backward): each strategy measured on
# this CPU and modeled on GPUs, collapsed so that all are on screen. DEMO_FIT="ring (modeled,
# a100-nvlink)" frames the ring's modeled timeline instead.
DEMO_FIT    ?= all

.PHONY: demo test bench build tools configure deps clean

demo: tools
	@mkdir -p out
	$(BUILD_DIR)/ringside compare --ranks 4 --trace out/demo.trace.json
	@echo; echo "demo: the default layer's speed on this machine, measured (it varies from run to run)"
	$(BUILD_DIR)/ringside bench layer --repetitions 3 --peer pytorch
	@if [ ! -x $(BUILD_DIR)/ringside-viewer ]; then echo "demo: no ringside-viewer in this build"; \
	elif [ -n "$$DISPLAY$$WAYLAND_DISPLAY" ]; then $(BUILD_DIR)/ringside-viewer out/demo.trace.json --fit "$(DEMO_FIT)"; \
	else xvfb-run -a -s "-screen 0 1920x1200x24" $(BUILD_DIR)/ringside-viewer out/demo.trace.json --fit "$(DEMO_FIT)" \
	       --screenshot out/demo.png --size 1600x1000 && echo "demo: no display, so the viewer drew out/demo.png"; fi

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD_DIR)/ringside bench kernels
	$(BUILD_DIR)/ringside bench layer

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# What the demo runs, without the tests: ringside, and ringside-viewer where it can be built.
tools: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target ringside
	@if ninja -C $(BUILD_DIR) -t query ringside-viewer > /dev/null 2>&1; then cmake --build $(BUILD_DIR) -j $(JOBS) --target ringside-viewer; fi

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

deps:
	@scripts/install-deps.sh

clean:
	rm -rf $(BUILD_DIR) out
