# EVA control service. `make run` and `make test` set everything up on first use.
# Every target that starts ROS processes keeps DDS on this machine and on its own domain.

PYTHON      ?= python3.11
VENV        := .venv
# The first working 3.12 among python3.12 on PATH and pyenv's installs (a pyenv shim can exist
# without working); expanded only by test-py312.
PYTHON312   ?= $(shell for p in python3.12 $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12); do \
                 $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)
VENV312     := .venv312
# The camera tests need OpenCV/zarr (not installed there). The gate-property generator guard is
# deselected: its "derandomized" sample depends on which project modules are loaded (Hypothesis
# draws 5 % of numbers from the constants of local modules), so its coverage shares are those of
# another sample here (tests/unit/egomimic_safety/test_gate_properties.py); `make test` runs it.
PY312_TESTS := tests/unit/egomimic_hw tests/unit/egomimic_safety \
               --ignore=tests/unit/egomimic_hw/test_camera_backends.py --ignore=tests/unit/egomimic_hw/test_camera_health.py \
               --deselect=tests/unit/egomimic_safety/test_gate_properties.py::test_generators_reach_every_reason_and_every_clamp
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.setup-stamp
DURATION    ?= 20
SOAK_DURATION := $(if $(filter command line environment,$(origin DURATION)),$(DURATION),600)
RUN_ARGS    ?=
# make run's default: the policy this project trained in simulation (policies/sim_box_grasp.json
# says how; make default-policy remakes it) on the box task's seed 1004, one of the held-out seeds
# it grasped in its evaluation, recording the run as an episode. RUN_ARGS come after these and win;
# RUN_ARGS that choose the policy, the cameras or the robot (policy:=, camera_backend:=, backend:=)
# drop them all: a box exists only in the synthetic cameras, and a recording needs an armed gate.
DEFAULT_POLICY := $(CURDIR)/policies/sim_box_grasp.ckpt
DEFAULT_RUN := policy:=$(DEFAULT_POLICY) task_seed:=1004 params_file:=$(CURDIR)/config/box_policy_eval.yaml \
               record:=true record_dir:=$(CURDIR)/out/episodes task_name:=sim_box_grasp
RUN_DEFAULTS = $(if $(filter policy:=% camera_backend:=% backend:=%,$(RUN_ARGS)),,$(DEFAULT_RUN))
PYTEST_ARGS ?=
DEMO_ARGS   ?=
EVAL_POLICY ?= $(DEFAULT_POLICY)
EVAL_SEEDS  ?= 1000:1020

export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_DOMAIN_ID ?= 42
export FASTDDS_DEFAULT_PROFILES_FILE ?= $(CURDIR)/config/fastdds_local.xml

MSG_SOURCES := $(wildcard ros2_ws/src/egomimic_msgs/msg/*.msg) ros2_ws/src/egomimic_msgs/CMakeLists.txt \
               ros2_ws/src/egomimic_msgs/package.xml ros2_ws/src/egomimic_msgs/pyproject.toml
# tf2_msgs (ros2/geometry2's interfaces, no PyPI wheel): built the same way, for /tf and /tf_static.
MSG_SOURCES += $(wildcard ros2_ws/src/tf2_msgs/msg/*.msg ros2_ws/src/tf2_msgs/srv/*.srv ros2_ws/src/tf2_msgs/action/*.action) \
               ros2_ws/src/tf2_msgs/CMakeLists.txt ros2_ws/src/tf2_msgs/package.xml ros2_ws/src/tf2_msgs/pyproject.toml

.DEFAULT_GOAL := help
.PHONY: help setup run test lint test-unit test-integration test-properties test-faults test-py312 bench soak replay-fixtures demo-learn eval-policy default-policy clean-venv shm-clean wheelhouse docker-check

help: ## list the targets
	@echo "EVA control service"
	@echo "  make run          set up if needed, run the whole graph in simulation for DURATION s (default 20) with the shipped"
	@echo "                   trained policy on the box task, record it as an episode (out/episodes), print a summary"
	@echo "  make test         set up if needed, lint, then run the whole test suite (unit + integration)"
	@echo "  make lint         ruff check, ruff format --check and mypy on the libraries (part of make test)"
	@echo "  make setup        create .venv with the pinned ROS 2 Kilted wheels, torch (CPU), build egomimic_msgs and tf2_msgs"
	@echo "  make test-unit    library tests only (fast, no DDS)"
	@echo "  make test-integration  real node processes over DDS"
	@echo "  make test-faults  the safety gate fault battery on the simulated graph (FAULT_TRIALS=3; also in make test)"
	@echo "  make test-properties  gate property tests at 10,000 examples per property (~12 min on 2 cores)"
	@echo "  make test-py312   kinematics (Pinocchio), sim driver and gate unit tests on Python 3.12 without the ARX SDK"
	@echo "  make bench        benchmarks under bench/ (not part of make test)"
	@echo "  make soak         the sim graph for DURATION s (default 600 here) beside a one-core CPU hog: HOLDs, rejections, rates, CPU, RSS"
	@echo "  make replay-fixtures  re-record the replay regression's fixture bags (tests/fixtures/bags) from the sim graph"
	@echo "  make demo-learn   record expert episodes through the graph, train, deploy: trained vs untrained vs expert success (DEMO_ARGS)"
	@echo "  make eval-policy  the box task's held-out trials for EVAL_POLICY (default: make run's) on EVAL_SEEDS (1000:1020) -> out/eval"
	@echo "  make default-policy  make demo-learn, then ship its checkpoint as make run's default (policies/sim_box_grasp.*; ~25 min)"
	@echo "  make shm-clean    remove Fast DDS shared memory left by killed processes on ROS_DOMAIN_ID (groups no live participant locks)"
	@echo "  make wheelhouse   download every wheel the container images install into wheelhouse/ (TORCH=cpu|cuda)"
	@echo "  make docker-check build the robot and policy-server images with buildah and smoke-test them (root, ~8 min, ~9 GB; not in make test)"
	@echo "  make clean-venv   delete .venv"
	@echo "variables: DURATION=<s>  RUN_ARGS='policy:=scripted ...'  PYTEST_ARGS=...  DEMO_ARGS='--demos 0:40 ...'  EVAL_POLICY=<ckpt> EVAL_SEEDS=a:b  ROS_DOMAIN_ID=<0-232>"

setup: $(STAMP) ## idempotent; a no-op when nothing changed

$(STAMP): requirements.lock pyproject.toml tools/fix_ros_wheel_cmake.py $(MSG_SOURCES)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) tools/fix_ros_wheel_cmake.py
	AMENT_PREFIX_PATH=$(CURDIR)/$(VENV) CMAKE_PREFIX_PATH=$(CURDIR)/$(VENV) \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
	  ./ros2_ws/src/egomimic_msgs -C cmake.define.Python3_EXECUTABLE=$(CURDIR)/$(PY)
	AMENT_PREFIX_PATH=$(CURDIR)/$(VENV) CMAKE_PREFIX_PATH=$(CURDIR)/$(VENV) \
	  $(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps \
	  ./ros2_ws/src/tf2_msgs -C cmake.define.Python3_EXECUTABLE=$(CURDIR)/$(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-build-isolation --no-deps -e .
	$(PY) -c "import rclpy, torch, arx5_interface, egomimic_msgs.msg, tf2_msgs.msg, egomimic_nodes, egomimic_launch" >/dev/null
	@touch $(STAMP)
	@echo "setup: done ($(VENV))"

run: $(STAMP) ## the whole graph in simulation with the default policy, then a summary
	$(VENV)/bin/egomimic-launch eva_bimanual.launch.py $(RUN_DEFAULTS) $(RUN_ARGS) --duration $(DURATION) --summary \
	  --summary-json out/run_summary.json --run-dir out/run

test: $(STAMP) lint ## the whole suite, as CI runs it
	@rm -f out/test-hang.txt
	$(PY) -m pytest tests $(PYTEST_ARGS) || { status=$$?; test ! -f out/test-hang.txt || cat out/test-hang.txt; exit $$status; }

lint: $(STAMP) ## ruff (lint and format) on the whole tree, mypy on the ROS-free libraries (pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test-unit: $(STAMP)
	$(PY) -m pytest tests -m "not integration" $(PYTEST_ARGS)

test-integration: $(STAMP)
	$(PY) -m pytest tests -m integration $(PYTEST_ARGS)

test-properties: $(STAMP) ## gate property tests at the full 10,000 examples per property
	EGOMIMIC_PROPERTY_EXAMPLES=10000 $(PY) -m pytest tests/unit/egomimic_safety/test_gate_properties.py $(PYTEST_ARGS)

test-faults: $(STAMP) ## the safety gate fault battery against the simulated graph (FAULT_TRIALS=3)
	EGOMIMIC_FAULT_TRIALS=$${FAULT_TRIALS:-3} $(PY) -m pytest tests/faults $(PYTEST_ARGS)

# Python 3.12 is the Python of ROS 2 Jazzy/Kilted; the ARX SDK wheel is cp311-only. A separate venv
# with only the libraries' light dependencies (versions from requirements.lock) shows that they,
# the sim driver and the gate import and pass there on the Pinocchio kinematics backend; the tests
# that need the SDK skip, saying so (PY312_TESTS says what is left out and why).
test-py312: ## the 3.12 check above (PYTHON312=/path/to/python3.12 to choose the interpreter)
	@test -n "$(PYTHON312)" || { echo "test-py312: no working Python 3.12 found (set PYTHON312=/path/to/python3.12)" >&2; exit 2; }
	@test -x $(VENV312)/bin/python || $(PYTHON312) -m venv $(VENV312)
	$(VENV312)/bin/python -m pip install --quiet --disable-pip-version-check -c requirements.lock \
	  numpy scipy pyyaml pin pytest hypothesis
	$(VENV312)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(VENV312)/bin/python -m pytest $(PY312_TESTS) -rs $(PYTEST_ARGS)

bench: $(STAMP) ## benchmarks print ratios and absolute figures and write JSON under out/bench
	$(PY) bench/image_transport.py --domain-base 93 --out out/bench/image_transport.json
	$(PY) bench/camera_ingestion.py --out out/bench/camera_ingestion.json
	$(PY) bench/kinematics_frames.py --out out/bench/kinematics_frames.json
	$(PY) bench/driver_jitter.py --domain 92 --out out/bench/driver_jitter.json
	$(PY) bench/policy_latency.py --out out/bench/policy_latency.json
	$(PY) bench/gate_decision.py --out out/bench/gate_decision.json
	$(PY) bench/async_chunking.py --out out/bench/async_chunking.json
	$(PY) bench/remote_overhead.py --out out/bench/remote_overhead.json
	$(PY) bench/graph_cpu.py --domain 96 --out out/bench/graph_cpu.json
	$(PY) bench/publish_stall.py --domain 87 --stops 120 --load 2
	$(PY) bench/deaf_reader.py --domain 91 --stops 150 --load 1
	$(PY) bench/port_death.py --domain 85 --stops 4
	$(PY) bench/take_stall.py --domain 83 --stops 150 --load 0
	$(PY) bench/join_stall.py --domain 89 --joins 15 --load 1
	$(PY) bench/join_latency.py --domain 81 --trials 8 --out out/bench/join_latency.json
	$(PY) bench/recorder.py --domain 97 --out out/bench/recorder.json
	$(PY) bench/observers.py --domain 98 --pairs 3 --out out/bench/observers.json

replay-fixtures: $(STAMP) ## re-record the replay regression's fixture bags (tests/fixtures/bags) from the sim graph
	$(PY) tools/record_replay_fixtures.py --out tests/fixtures/bags

soak: $(STAMP) ## not part of make test: 10 minutes by default
	$(PY) tools/soak.py --duration $(SOAK_DURATION) --hogs 1 --out out/soak.json

demo-learn: $(STAMP) ## record expert episodes through the graph, train, deploy, compare (not in make test)
	$(PY) tools/demo_learn.py --out out/demo_learn $(DEMO_ARGS)

eval-policy: $(STAMP) ## the box task's trials for EVAL_POLICY (default: make run's) on EVAL_SEEDS (1000:1020), as demo-learn judges them
	$(VENV)/bin/egomimic-launch eva_bimanual.launch.py policy:=$(EVAL_POLICY) \
		task_seed:=$(firstword $(subst :, ,$(EVAL_SEEDS))) params_file:=$(CURDIR)/config/box_policy_eval.yaml \
		--trials $(EVAL_SEEDS) --trial-timeout 12 --trials-json out/eval/trials.json --run-dir out/eval/run --quiet

default-policy: $(STAMP) ## make demo-learn into out/default_policy, then ship it as make run's default policy
	$(PY) tools/demo_learn.py --out out/default_policy $(DEMO_ARGS)
	$(PY) tools/ship_policy.py --from out/default_policy --to policies/sim_box_grasp

shm-clean: $(STAMP) ## remove stale Fast DDS shared memory of ROS_DOMAIN_ID's ports (groups no live participant locks)
	$(PY) -c "import os; from egomimic_launch.cli import clean_shared_memory; clean_shared_memory(int(os.environ['ROS_DOMAIN_ID']))"

clean-venv:
	rm -rf $(VENV)

wheelhouse: $(STAMP) ## the wheels of requirements.lock (+ docker/requirements-robot.txt), once, for offline image builds
	TORCH=$(or $(TORCH),cpu) PY=$(PY) bash docker/wheelhouse.sh

docker-check: $(STAMP) ## not part of make test: debootstrap base, buildah builds, compose paths, smoke test (docker/README.md)
	@test -d wheelhouse/common -a -d wheelhouse/torch-cpu || $(MAKE) --no-print-directory wheelhouse TORCH=cpu
	PY=$(PY) bash docker/check.sh
