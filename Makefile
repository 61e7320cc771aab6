# make demo  - set up (tools/install.sh) and run the demo: train + evaluate + visualise
# make test  - set up and run the test suite (2 processes, pytest-xdist)
# make test-quick - the suite without the tests marked slow (the inner loop, ~3 min)
PY := .venv/bin/python

.PHONY: install demo test test-quick
install:
	bash tools/install.sh
demo: install
	bash tools/demo.sh
test: install
	$(PY) -m pytest tests -q -p no:cacheprovider -n 2
test-quick:
	$(PY) -m pytest tests -q -p no:cacheprovider -n 2 -m "not slow"
