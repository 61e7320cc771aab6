# make demo  - set up (tools/install.sh) and run the demo: train + evaluate + visualise
# make test  - set up and run the test suite
PY := .venv/bin/python

.PHONY: install demo test
install:
	bash tools/install.sh
demo: install
	bash tools/demo.sh
test: install
	$(PY) -m pytest tests -q -p no:cacheprovider
