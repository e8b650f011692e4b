# The two set-up commands: `make demo` and `make test`. Both need only python3 and the package
# registries; on Debian/Ubuntu run as root they also install PoCL from the distribution, because
# the PoCL inside the pyopencl wheel (3.0, LLVM 14) cannot compile for CPUs newer than LLVM 14
# knows (it fails with "unknown target CPU 'generic'").
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test opencl-runtime bench clean

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

demo: $(PY) opencl-runtime
	$(PY) -m pip install -q -e ".[opencl,nvrtc]"
	$(VENV)/bin/gpucg demo

test: $(PY) opencl-runtime
	$(PY) -m pip install -q -e ".[test]"
	GPUCG_REQUIRE=opencl,nvrtc GPUCG_CACHE_DIR=$(CURDIR)/.gpucg_cache $(PY) -m pytest -q

bench: $(PY) opencl-runtime
	$(PY) -m pip install -q -e ".[opencl]"
	$(VENV)/bin/gpucg bench scan
	$(VENV)/bin/gpucg bench topk

clean:
	rm -rf $(VENV) .gpucg_cache .pytest_cache .hypothesis
