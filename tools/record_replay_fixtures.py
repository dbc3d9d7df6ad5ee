"""Record the replay regression's fixture bags (`make replay-fixtures`) from the simulated graph.

    .venv/bin/python tools/record_replay_fixtures.py [--out tests/fixtures/bags] [--domain 79]

Each fixture is a real run of the whole sim graph (synthetic cameras, simulated arms, the scripted
policy, auto arm) with bag:=true, cut down to the topics the replay reads
(egomimic_launch.replay) so it stays small in the repository:
  nominal        armed for 4 s, then SIGINT to the launcher (it disarms the gate before teardown)
  frozen_camera  armed, 2 s later the left wrist camera frozen through the camera node's runtime
                 fault injection (inject_fault freeze:left_wrist): the gate latches HOLD; SIGINT
                 4 s after ARMED (the gate, in HOLD, latches ESTOP on its way out)
  model_nominal  `make run`'s default policy (the shipped checkpoint MODEL, the box of seed
                 MODEL_TASK_SEED in view, config/box_policy_eval.yaml) armed for 4 s, with the
                 camera frames (bag_images:=true): only the frames within reach of a query are
                 kept (from max_image_age_s + sync_tolerance_s before a chunk's observation stamp
                 to sync_tolerance_s after it); the synthetic frames compress to a few KiB each
                 in the bag's zstd file
Each bag starts 1 s before the gate's first status (the bag node starts first; before that it
holds only the other nodes starting).
Beside each bag: replay.yaml, the gate's and the policy's parameters in that run (the deployment
file and the launcher's generated file, merged as each node read them). Each new fixture is replayed at once
and kept only if the replay reproduces it: a live decision that depended on timing the bag does
not hold (the gate and the bag received two messages in different orders, at the fault instant
or in a deferral under load) would make a poor fixture, so it records again (ATTEMPTS; MODEL_ATTEMPTS
for the model fixture).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [str(Path(sys.executable).parent / "egomimic-launch"), "eva_bimanual.launch.py"]
SIM_YAML = REPO / "ros2_ws/src/egomimic_bringup/config/eva_sim.yaml"
NS = "eva"
ARMED_TIMEOUT_S = 90.0
FAULT_AFTER_ARMED_S = 2.0
ATTEMPTS = 3
"""Recordings tried per fixture until its replay reproduces it (module docstring)."""
MODEL_ATTEMPTS = 10
"""The same for the model fixture: its bag also takes 83 MB/s of frames, and on the 2-core machine
on 2026-12-06 2 of 17 recordings were reproduced (the bag received a health report or a joint
state late, or none before the arm request)."""
LEAD_S = 1.0
"""Kept before the gate's first status (the bag starts first: the rest is the other nodes starting)."""
MODEL = "policies/sim_box_grasp.ckpt"
"""The model fixture's policy, relative to the repository (so its replay.yaml names it so)."""
MODEL_TASK_SEED = 1004
MODEL_PARAMS = REPO / "config/box_policy_eval.yaml"
"""`make run`'s params_file for its default policy (its query cadence)."""
FIXTURES = {
    "nominal": dict(armed_s=4.0, fault=None, model=False),
    "frozen_camera": dict(armed_s=4.0, fault="freeze:left_wrist", model=False),
    "model_nominal": dict(armed_s=4.0, fault=None, model=True),
}


def _drive(armed_s: float, fault: str | None, stop: threading.Event, said: list[str]) -> None:
    """Wait for the gate's ARMED status; with a fault, set the camera node's inject_fault after
    FAULT_AFTER_ARMED_S of armed motion (a SetParameters call, as `ros2 param set` makes); return
    `armed_s` after ARMED (the caller then stops the launcher)."""
    import rclpy
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    from rclpy.executors import SingleThreadedExecutor

    from egomimic_msgs.msg import GateStatus
    from egomimic_nodes import topics

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("replay_fixture_fault", namespace=NS, context=context)
    armed_at: list[float] = []
    node.create_subscription(
        GateStatus,
        topics.SAFETY_STATUS.name(),
        lambda m: armed_at.append(time.monotonic()) if m.state == GateStatus.ARMED and not armed_at else None,
        topics.SAFETY_STATUS.qos,
    )
    client = node.create_client(SetParameters, "cameras/set_parameters")
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + ARMED_TIMEOUT_S
        while not stop.is_set() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
            if armed_at and time.monotonic() >= armed_at[0] + (FAULT_AFTER_ARMED_S if fault else armed_s):
                break
        if not armed_at:
            said.append(f"the gate did not arm within {ARMED_TIMEOUT_S:.0f} s")
            return
        if not fault:
            return
        if not client.wait_for_service(timeout_sec=5.0):
            said.append("the camera node's set_parameters service did not answer")
            return
        request = SetParameters.Request()
        value = ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=fault)
        request.parameters = [Parameter(name="inject_fault", value=value)]
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=5.0)
        result = future.result()
        if result is None or not all(r.successful for r in result.results):
            said.append(f"inject_fault {fault} was refused: {result}")
        else:
            said.append(f"inject_fault {fault} set {time.monotonic() - armed_at[0]:.1f} s after ARMED")
        while not stop.is_set() and time.monotonic() < armed_at[0] + armed_s:
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def _first_status_ns(bag: Path, topic: str) -> int:
    from egomimic_data.bags import open_reader

    reader = open_reader(bag)
    try:
        conns = [c for c in reader.connections if c.topic == topic]
        return next((t for _c, t, _raw in reader.messages(connections=conns)), 0)
    finally:
        reader.close()


def node_parameters(run_dir: Path, node: str, params_file: Path | None = None) -> dict:
    """A node's parameters as it read them: the deployment file, the launcher's generated one,
    then the run's params_file (the launcher passes them in that order: the last one wins)."""
    from egomimic_launch.replay import node_params

    merged: dict = {}
    extra = (params_file,) if params_file is not None else ()
    for path in (SIM_YAML, *sorted((run_dir / "params").glob(f"{node}*.yaml")), *extra):
        merged.update(node_params(path, node))
    return merged


class NotReproduced(RuntimeError):
    """The replay of a new recording differs from it (a live decision that depended on timing the
    bag does not hold: the gate and the bag received two messages in different orders)."""


def record(name: str, armed_s: float, fault: str | None, out: Path, work: Path, model: bool = False) -> Path:
    from egomimic_data.bags import open_reader, select
    from egomimic_launch.replay import PARAMS_FILE, _Topics, configs_from_params, replay
    from egomimic_launch.replay_policy import frame_windows, in_windows
    from egomimic_nodes.serialized import read_header

    work.mkdir(parents=True, exist_ok=True)
    run_dir, bag_dir = work / f"{name}_run", work / f"{name}_bags"
    policy_args = (
        [
            f"policy:={REPO / MODEL}",
            f"task_seed:={MODEL_TASK_SEED}",
            f"params_file:={MODEL_PARAMS}",
            "bag_images:=true",
        ]
        if model
        else ["policy:=scripted"]
    )
    cmd = [
        *LAUNCH,
        *policy_args,
        "bag:=true",
        f"bag_dir:={bag_dir}",
        "--duration",
        str(ARMED_TIMEOUT_S + armed_s + 30),  # a bound; the recording stops armed_s after ARMED
        "--run-dir",
        str(run_dir),
        "--quiet",
    ]
    print(f"[fixtures] {name}: {' '.join(cmd[1:])}", flush=True)
    launcher = subprocess.Popen(cmd, cwd=REPO, env=dict(os.environ))
    said: list[str] = []
    stop = threading.Event()
    driver = threading.Thread(target=_drive, args=(armed_s, fault, stop, said), daemon=True)
    driver.start()
    while driver.is_alive() and launcher.poll() is None:
        driver.join(timeout=0.5)
    stop.set()
    driver.join(timeout=10)
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGINT)
    rc = launcher.wait(timeout=60)
    for line in said:
        print(f"[fixtures] {name}: {line}", flush=True)
    bags = sorted(bag_dir.glob("rosbag2_*"))
    if len(bags) != 1:
        raise SystemExit(f"[fixtures] {name}: expected one bag under {bag_dir}, found {len(bags)} (launcher exit {rc})")
    params = node_parameters(run_dir, "safety_gate", MODEL_PARAMS if model else None)
    config, _ = configs_from_params(params)
    dest = out / name
    staged = work / name
    names = _Topics(NS, config.required_cameras)
    policy_params = node_parameters(run_dir, "policy", MODEL_PARAMS if model else None)
    topics_kept = names.needed() | {names.chunk}
    keep = None
    if model:
        topics_kept |= set(names.images)
        reader = open_reader(bags[0])
        try:
            conns = [c for c in reader.connections if c.topic == names.chunk]
            windows = frame_windows([bytes(raw) for _c, _t, raw in reader.messages(connections=conns)], policy_params)
        finally:
            reader.close()

        def keep(topic: str, _received_ns: int, raw: bytes) -> bool:
            return topic not in names.images or in_windows(read_header(raw)[0], windows)

        policy_params["policy"] = MODEL  # the repository's copy, wherever the replay runs
    counts = select(
        bags[0],
        staged,
        topics_kept,
        compress=True,
        since_ns=_first_status_ns(bags[0], names.status) - int(LEAD_S * 1e9),
        keep=keep,
    )
    (staged / PARAMS_FILE).write_text(
        "# The safety gate's and the policy's parameters while this fixture was recorded (tools/record_replay_fixtures.py)\n"
        + yaml.safe_dump(
            {
                "/**/safety_gate": {"ros__parameters": params},
                "/**/policy": {"ros__parameters": policy_params},
            },
            sort_keys=True,
        )
    )
    report = replay(staged)
    print(report.text(), flush=True)
    if model and (report.policy.skipped or not report.policy.chunks):
        # not a matter of timing: another recording would be skipped alike
        raise SystemExit(f"[fixtures] {name}: the replay's policy stage did not run: {report.policy.skipped}")
    if not report.ok:
        raise NotReproduced(name)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(staged, dest)
    size = sum(f.stat().st_size for f in dest.iterdir())
    print(f"[fixtures] {name}: {sum(counts.values())} messages, {size / 1024:.0f} KiB -> {dest}", flush=True)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests/fixtures/bags", help="where the fixtures go")
    parser.add_argument("--domain", type=int, default=79, help="ROS_DOMAIN_ID of the recording runs")
    parser.add_argument("--only", choices=sorted(FIXTURES), help="record one fixture")
    args = parser.parse_args(argv)
    os.chdir(REPO)  # the model fixture's replay finds policies/ from here, wherever it was called
    os.environ["ROS_DOMAIN_ID"] = str(args.domain)
    from egomimic_launch.environment import apply_to_this_process

    apply_to_this_process()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="egomimic-fixtures-"))
    for name, spec in FIXTURES.items():
        if args.only and name != args.only:
            continue
        attempts = MODEL_ATTEMPTS if spec["model"] else ATTEMPTS
        for attempt in range(1, attempts + 1):
            try:
                record(name, spec["armed_s"], spec["fault"], args.out, tmp / f"{name}_try{attempt}", spec["model"])
                break
            except NotReproduced:
                print(
                    f"[fixtures] {name}: attempt {attempt} of {attempts} not reproduced by its replay "
                    f"(kept: {tmp / f'{name}_try{attempt}' / name})",
                    flush=True,
                )
        else:
            print(f"[fixtures] {name}: no recording reproduced; the attempts are kept under {tmp}", flush=True)
            return 1
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
