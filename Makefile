# The two commands of the README. Both set up .venv first (idempotent), so each works on a fresh machine.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)  ## the main job: tokenizer, data, pretraining, fine-tuning on the bundled corpus, with a summary
	$(VENV)/bin/litebert demo

# One test process per core (at most 4), each on one thread (tests/conftest.py); a file's tests stay together so
# that its module fixtures are built once. The 25 slowest tests are listed at the end: the suite must stay well
# inside CI's 20 minutes, and that list says where its time goes.
PYTEST := $(VENV)/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile --durations=25

test: $(STAMP)  ## the whole suite, slow end-to-end checks included
	$(PYTEST)

test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

clean:
	rm -rf $(VENV) out build *.egg-info
