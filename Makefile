# The two set-up commands: `make demo` and `make test`. Both need only python3 and the package
# registries; on Debian/Ubuntu run as root they also install PoCL from the distribution, because
# the PoCL inside the pyopencl wheel (3.0, LLVM 14) cannot compile for CPUs newer than LLVM 14
# knows (it fails with "unknown target CPU 'generic'").
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test opencl-runtime oclgrind torch-cpu bench resources-json clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

opencl-runtime:
	@if [ ! -e /etc/OpenCL/vendors/pocl.icd ] && command -v apt-get >/dev/null 2>&1 \
	    && [ "$$(id -u)" = 0 ]; then \
	  echo "installing the distribution's PoCL (OpenCL on the CPU)"; \
	  apt-get install -y -q pocl-opencl-icd >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q pocl-opencl-icd >/dev/null 2>&1; } \
	    || echo "warning: could not install pocl-opencl-icd; OpenCL may be unusable here"; \
	fi

# Oclgrind, a simulated OpenCL GPU that checks every memory access (tests/test_oclgrind.py and
# the memory traffic figures); like PoCL, from the distribution when run as root.
oclgrind:
	@if ! [ -e /usr/lib/oclgrind/liboclgrind-rt-icd.so ] && command -v apt-get >/dev/null 2>&1 \
	    && [ "$$(id -u)" = 0 ]; then \
	  echo "installing the distribution's Oclgrind (the race and bounds checker)"; \
	  apt-get install -y -q oclgrind >/dev/null 2>&1 \
	    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q oclgrind >/dev/null 2>&1; } \
	    || echo "warning: could not install oclgrind; the Oclgrind checks will fail (GPUCG_REQUIRE)"; \
	fi

demo: $(PY) opencl-runtime
	$(PY) -m pip install -q -e ".[opencl,nvrtc]"
	$(VENV)/bin/gpucg demo

# torch's CPU build first, where the machine has its wheel ("+cpu" never matches PyPI's
# multi-GB CUDA builds, so this fails fast elsewhere): the test extra's torch==2.13.0 (which
# torchvision==0.28.0 pins) is then already satisfied.
torch-cpu: $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0+cpu" 2>/dev/null \
	    || echo "note: torch==2.13.0+cpu is not on this machine; the test extra takes torch==2.13.0"

# The suite in TEST_WORKERS pytest-xdist processes, one a core on the 2-core CI machine
# (`make test TEST_WORKERS=0` runs it in one process, `auto` on every core); each worker compiles
# its share of the end-of-session NVRTC pass (tests/nvrtc_pass.py: the worker done first takes
# over what the other has rendered) and keeps its own PoCL cache.
TEST_WORKERS ?= 2
test: $(PY) opencl-runtime oclgrind
	@$(MAKE) --no-print-directory torch-cpu
	$(PY) -m pip install -q -e ".[test]"
	HF_HUB_OFFLINE=1 GPUCG_REQUIRE=opencl,nvrtc,oclgrind GPUCG_CACHE_DIR=$(CURDIR)/.gpucg_cache \
		$(PY) -m pytest -q -n $(TEST_WORKERS)

# Rewrite tests/resources/FAMILY.json, the figures tests/test_resources.py and
# tests/test_oclgrind.py compare against (ptxas resources of every default config, Oclgrind
# traffic), one file per operator family; FAMILY=dense rewrites one family's. Review the diff.
resources-json: $(PY) opencl-runtime oclgrind
	$(PY) -m pip install -q -e ".[test]"
	GPUCG_CACHE_DIR=$(CURDIR)/.gpucg_cache $(PY) -m gpucg.verify.baseline tests/resources \
		$(if $(FAMILY),--family $(FAMILY))

bench: $(PY) opencl-runtime
	$(PY) -m pip install -q -e ".[opencl]"
	$(VENV)/bin/gpucg bench scan
	$(VENV)/bin/gpucg bench topk
	$(VENV)/bin/gpucg bench conv2d
	$(VENV)/bin/gpucg bench dense
	$(VENV)/bin/gpucg bench reduce
	$(VENV)/bin/gpucg bench softmax

clean:
	rm -rf $(VENV) .gpucg_cache .pytest_cache .hypothesis
