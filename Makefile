# Two commands a newcomer needs:  make demo   (set up + estimate a bundled model)
#                                 make test   (set up everything + run the whole test suite)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip -q --disable-pip-version-check

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install --upgrade pip

# light install: the estimator and the CLI (no torch)
$(VENV)/.core: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[cli]'
	touch $@

# everything: torch first (the CPU build that lies on disk here), then the extras, at the versions the suite
# last passed with (requirements/tested.txt: a library released since cannot turn a clean clone's CI red)
$(VENV)/.all: pyproject.toml requirements/tested.txt | $(VENV)/bin/python
	$(PIP) install torch==2.13.0 setuptools wheel
	cp requirements/tested.txt $(VENV)/constraints.txt
	# DeepSpeed is a source dist whose build imports torch: build it against the torch above, no CUDA ops
	DS_BUILD_OPS=0 $(PIP) install --no-build-isolation -c $(VENV)/constraints.txt 'deepspeed>=0.16'
	$(PIP) install -c $(VENV)/constraints.txt -e '.[all,test]'
	# torchtitan's config classes check the exports; its wheel pins spmd_types==0.2.3 and pulls wandb,
	# tensorboard and torchdata, none of which its config code imports: the two packages alone, as tested
	$(PIP) install --no-deps torchtitan==0.3.0 spmd-types==0.3.1
	bash scripts/system-deps.sh
	touch $(VENV)/.core $@

# the documentation site, built offline into site/ (example outputs: python scripts/gen_examples.py)
$(VENV)/.docs: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -e '.[cli,web,docs]'
	touch $@

.PHONY: demo test setup lint bench docs lock
setup: $(VENV)/.all

demo: $(VENV)/.core
	$(VENV)/bin/vramfit estimate --model meta-llama/Llama-2-7b-hf --method qlora --seq-len 4096 --micro-batch-size 2 --gradient-checkpointing full

test: $(VENV)/.all
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest

docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(VENV)/.all
	$(PY) benchmarks/accuracy.py
	$(PY) benchmarks/estimate_speed.py

# after a green `make test` on newer releases (pip install -U ... in .venv): pin what passed
lock: $(VENV)/.all
	{ sed -n '/^#/p' requirements/tested.txt; $(PY) -m pip freeze --exclude-editable | grep -v -i '^vramfit' \
	  | sed 's/^torch==.*/torch==2.13.0/'; } > requirements/tested.new && mv requirements/tested.new requirements/tested.txt
