# make demo  - set up (tools/install.sh) and run the demo: train + evaluate + visualise
# make test  - set up and run the test suite on the pinned stack (2 processes, pytest-xdist)
# make test-quick  - the suite without the tests marked slow (the inner loop, ~3 min)
# make test-extended - the tests marked extended: longer repetitions of what make test checks once
# make test-compat - the compatibility jobs: torch 2.1 / Python 3.9 and the newest torch / Python 3.12,
#                    with mmcv-lite (.dev_scripts/compat_test.sh; each makes its environment once)
# make test-stress   - the process- and timeout-bound test modules 10 times each beside a CPU hog
#                      (.dev_scripts/stress_test.sh; needs stress-ng)
# make test-soak     - 2,000 training iterations with memory and open files sampled (~20 min)
# make gpu-kit       - .gpu_kit/: the wheels and node command the lent GPU node needs (.dev_scripts/gpu_kit/)
# make gpu-rehearsal - the node command on this CPU in an imitation of the node (Python 3.12, torch 2.11)
PY := .venv/bin/python
# the pinned stack has every package: a test marked needs(...) fails there instead of skipping;
# one compute thread per test process and per process it starts (the 2 workers share the cores);
# --dist loadgroup keeps each xdist_group (the modules that start training processes) on one worker;
# bytecode caches written (an environment with PYTHONDONTWRITEBYTECODE would have each of the
# ~180 processes the suite starts compile the package's sources again: 0.45 s each)
PYTEST := VATTN_FULL_STACK=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE= \
	$(PY) -m pytest tests projects -q -p no:cacheprovider -n 2 --dist loadgroup
PYTEST_ARGS ?=

.PHONY: install demo test test-quick test-extended test-compat test-stress test-soak gpu-kit gpu-rehearsal
install:
	bash tools/install.sh
demo: install
	bash tools/demo.sh
test: install
	$(PYTEST) -m "not extended" $(PYTEST_ARGS)
test-quick:
	$(PYTEST) -m "not slow and not extended" $(PYTEST_ARGS)
test-extended: install
	$(PYTEST) -m extended $(PYTEST_ARGS)
test-compat:
	bash .dev_scripts/compat_test.sh floor
	bash .dev_scripts/compat_test.sh newest
test-stress: install
	bash .dev_scripts/stress_test.sh 10
test-soak: install
	VATTN_SOAK=1 VATTN_FULL_STACK=1 OMP_NUM_THREADS=1 $(PY) -m pytest tests/engine/test_soak.py -q -s \
		-p no:cacheprovider $(PYTEST_ARGS)
gpu-kit: install
	bash .dev_scripts/gpu_kit/make_kit.sh
gpu-rehearsal: gpu-kit
	bash .dev_scripts/gpu_kit/rehearse.sh
