"""THE graph definition of EVA: which nodes run, in which order, with which parameters.

One source for both launchers: `egomimic-launch` (pip world, launch/egomimic_launch) runs the
NodeSpecs directly; `launch/eva_bimanual.launch.py` maps the same NodeSpecs one-to-one onto
launch_ros actions under a real ROS 2 install. Nothing about the graph is decided elsewhere.

Start order is dependency order: drivers first (the arms must be held by their own watchdog
before anything can command them), then the frames node, the cameras, the observers and the
recorder (record:=true), the safety gate (armed here when auto_arm is set: it then waits in
ARMING for the first command), and the policy last. Every process that is not on the command
path starts before arming: a Python process starting up takes a core for a second or two, and
one that started while the gate was ARMED starved the cameras past the gate's limit. Teardown
runs in reverse start order, except that the nodes marked `stop_first` (the recorder) stop
before all others (Graph.stop_order), so the episode is committed while every stream still
runs; the drivers stop last. The bag node (bag:=true) comes before all of them, so it records
the start-up and stops after everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from egomimic_bringup import CONFIG_DIR, PACKAGE_DIR
from egomimic_data.bag_config import BagConfig
from egomimic_data.recording_config import RecorderConfig
from egomimic_hw.cameras.config import CameraNodeConfig
from egomimic_hw.description import ARMS, CAMERAS
from egomimic_nodes.cpus import online_cpu_list

NODE_PACKAGE = "egomimic_nodes"


@dataclass(frozen=True)
class LaunchArgument:
    name: str
    default: str
    description: str
    choices: tuple[str, ...] = ()


LAUNCH_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("namespace", "eva", "robot namespace; every topic is relative to it"),
    LaunchArgument("backend", "sim", "driver backend", ("sim", "arx5")),
    LaunchArgument(
        "camera_backend",
        "",
        "camera backend ('' = synthetic with backend:=sim; with arx5 the "
        "per-camera hardware backends of ARX5_CAMERA_BACKENDS); external = no camera node: a stock driver "
        "(realsense2_camera, usb_cam) publishes cameras/<cam>/image_raw and the gate judges the cameras by "
        "those images' stamps (no freeze detection)",
        ("", "synthetic", "replay", "v4l2", "realsense", "external"),
    ),
    LaunchArgument(
        "replay_path",
        "",
        "camera_backend:=replay: an episode store (*.zarr) or a directory of images "
        "(tools/make_sim_episode.py writes one)",
    ),
    LaunchArgument("policy", "scripted", "none | scripted | expert | fold | pi | moe | <checkpoint> | tcp://host:port"),
    LaunchArgument(
        "task_seed",
        "-1",
        "the simulated box task (synthetic cameras only): the seed that places the box the cameras draw "
        "and policy:=expert reaches for; the summary reports the task's success. -1 = no task "
        "(policy:=expert then takes seed 0)",
    ),
    LaunchArgument("inject_latency_ms", "0", "extra latency added to every policy query"),
    LaunchArgument(
        "policy_sha256",
        "",
        "pin: refuse a checkpoint whose model config (canonical JSON) has another SHA-256 ('' = no pin; "
        "mandatory for the legacy Fold checkpoint)",
    ),
    LaunchArgument("config_sha256", "", "the same pin under its earlier name (give one of the two)"),
    LaunchArgument(
        "allow_cpu_policy",
        "false",
        "with the policy's device cuda and no CUDA device, run the model on the CPU instead of refusing to start "
        "(seconds per chunk)",
        ("true", "false"),
    ),
    LaunchArgument(
        "auto_arm",
        "",
        "call safety/arm once the graph is up ('' = true with sim, false with arx5)",
        ("", "true", "false"),
    ),
    LaunchArgument(
        "viz",
        "false",
        "run the nodes rviz needs: robot_state (TF, /tf_static, robot_description from urdf/eva.urdf) and monitor "
        "(viz/markers); off by default, they are not part of control (rviz/eva.rviz shows them)",
        ("true", "false"),
    ),
    LaunchArgument(
        "web",
        "false",
        "serve a live view of the graph (what rviz shows, the cameras as JPEG, the gate's state) to the Foxglove "
        "app over WebSocket at ws://web_host:web_port (the webview node; pip extra `web`); also runs viz's nodes",
        ("true", "false"),
    ),
    LaunchArgument("web_port", "8765", "the web view's WebSocket port (0: any free port, logged)"),
    LaunchArgument(
        "web_host",
        "127.0.0.1",
        "the address the web view binds: 127.0.0.1 (reach it over an SSH tunnel) or 0.0.0.0 (the whole network can "
        "watch; nobody can command through it)",
    ),
    LaunchArgument("params_file", "", "a YAML file overriding node parameters (applied last)"),
    LaunchArgument(
        "realtime",
        "true",
        "run the gate (SCHED_FIFO), the frames node and the policy's tick (SCHED_FIFO below the gate), the "
        "drivers, cameras and the rest of the policy (niceness -5), the recorder, bag and the policy's model "
        "(-2) at a higher scheduling priority than the rest, where permitted; logged either way",
        ("true", "false"),
    ),
    LaunchArgument(
        "control_cpus",
        "",
        "pin the gate, the drivers and frames to these CPUs (a Linux CPU list: 2, 2-3, "
        "0,2-3; e.g. cores kept free with isolcpus on a robot PC); '' = no pinning",
    ),
    LaunchArgument("stack_cpus", "", "pin the cameras and the policy to these CPUs (same syntax); '' = no pinning"),
    LaunchArgument(
        "record",
        "false",
        "run the episode recorder; true also opens an episode once every stream is live and commits it at "
        "shutdown (recorder/start and recorder/stop work either way while it runs)",
        ("true", "false"),
    ),
    LaunchArgument(
        "record_dir",
        RecorderConfig.record_dir,
        "where episodes are written (<UTC start time>.zarr each); relative to the directory the launcher runs in",
    ),
    LaunchArgument(
        "bag",
        "false",
        "record a rosbag2 (MCAP) of the graph's topics from start to shutdown (egomimic-bag info|play|repair, "
        "ros2 bag info|play read it)",
        ("true", "false"),
    ),
    LaunchArgument(
        "bag_dir",
        BagConfig.bag_dir,
        "where bags are written (rosbag2_<UTC start time> each); relative to the directory the launcher runs in",
    ),
    LaunchArgument(
        "bag_images",
        "false",
        "with bag:=true, also record the camera images (image_raw, image_raw/compressed: ~27 MB/s for three "
        "640x480 cameras at 30 Hz)",
        ("true", "false"),
    ),
    LaunchArgument(
        "unsafe_limits",
        "false",
        "let params_file set the safety gate's limits above their documented safe maxima (lower bounds, "
        "types and orderings still hold); every such value is logged at start and /diagnostics reports it. "
        "For bench tests of the gate, never on a robot near people",
        ("true", "false"),
    ),
    LaunchArgument(
        "security",
        "false",
        "SROS2, on a ROS install whose Fast DDS has the DDS Security plugins: ROS_SECURITY_ENABLE=true, "
        "ROS_SECURITY_STRATEGY=Enforce and one enclave per node (/<namespace>/<node>, and "
        "/<namespace>/egomimic_launcher for the launcher and its steps) from the keystore in "
        "ROS_SECURITY_KEYSTORE (README 'DDS between machines'). Refused on pip installs: their Fast DDS has no "
        "security plugins",
        ("true", "false"),
    ),
    LaunchArgument("task_name", RecorderConfig.task_name, "recorded into episodes (also settable at run time)"),
    LaunchArgument(
        "task_description", RecorderConfig.task_description, "recorded into episodes (also settable at run time)"
    ),
)


ARX5_CAMERA_BACKENDS = {"front_1": "v4l2", "left_wrist": "realsense", "right_wrist": "realsense"}
"""The real EVA's cameras (docs/eva.md): wrists are RealSense D405s (by serial), the head camera a UVC
device (by path); serials, devices and calibration files live in config/eva_arx5.yaml."""


@dataclass(frozen=True)
class NodeSpec:
    """One node process: `python -m <module> --ros-args -r __node:=<name> -r __ns:=/<ns> ...`."""

    name: str
    module: str
    namespace: str
    parameters: dict = field(default_factory=dict)
    """Set by launch arguments: they win over `params_files`."""
    params_files: tuple[str, ...] = ()
    """The deployment's YAML (config/eva_<backend>.yaml), applied first."""
    override_files: tuple[str, ...] = ()
    """The operator's `params_file`, applied last: it wins over everything, launch arguments included."""
    lifecycle: bool = False
    arm_after: bool = False
    """With auto_arm, the launcher calls safety/arm once this node is up (before the policy
    starts, so the policy's first command is the one checked against the start pose)."""
    required: bool = True
    """A required node that exits takes the whole system to a safe stop."""
    stop_first: bool = False
    """Teardown stops this node before every other (Graph.stop_order), whatever its place in
    the start order: the recorder, so that its episode ends while every stream is still live."""
    priority: str = ""
    """With the `realtime` launch argument: "fifo" (the gate: SCHED_FIFO where permitted), "path"
    (frames: SCHED_FIFO below the gate), "nice" (the drivers, cameras and policy: niceness -5; the
    policy's tick and action writer at the path tier) or "stack" (recorder, bag: niceness -2);
    "" runs at normal priority (rviz's nodes, the web view: an observer tier at niceness 10 with its
    middleware threads at the control tier measured no better, bench/observers.py). See
    egomimic_nodes.spin."""
    cpus: str = ""
    """A Linux CPU list the node pins itself to (control_cpus / stack_cpus), "" for none. See
    egomimic_nodes.cpus.pin_cpus."""
    description: str = ""
    enclave: str = ""
    """With security:=true, the node's SROS2 enclave (`--enclave`): /<namespace>/<name>."""

    def write_launch_params(self, directory: Path) -> Path:
        """This node's launch-argument parameters as a ROS params file, for both launchers.

        The key is `/**/<name>`, the same as the deployment YAML's and the usual operator's, so
        that rcl merges the three files under one key in command-line order: deployment, then
        launch arguments, then params_file. (rcl applies a node's matching keys in the order each
        key first appeared: an exact `/eva/policy` key here would come after the deployment's
        `/**/policy` and beat the params_file that updates that first key.)"""
        import yaml

        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.yaml"
        path.write_text(
            yaml.safe_dump({f"/**/{self.name}": {"ros__parameters": dict(self.parameters)}}, sort_keys=True)
        )
        return path


@dataclass(frozen=True)
class Graph:
    nodes: tuple[NodeSpec, ...]
    namespace: str
    auto_arm: bool
    args: dict

    @property
    def unsafe_limits(self) -> bool:
        return self.args.get("unsafe_limits") == "true"

    @property
    def secured(self) -> bool:
        return self.args.get("security") == "true"

    @property
    def launcher_enclave(self) -> str:
        """The enclave of the launcher's own participant and of its steps (arm, e-stop, waits):
        with Enforce, a participant without one cannot join. "" without security:=true."""
        return enclave_of(self.namespace, LAUNCHER_ENCLAVE) if self.secured else ""

    def stop_order(self) -> tuple[NodeSpec, ...]:
        """The order teardown stops the nodes in: those marked `stop_first`, then every other
        node, each group in reverse start order."""
        backwards = self.nodes[::-1]
        return tuple(n for n in backwards if n.stop_first) + tuple(n for n in backwards if not n.stop_first)

    def enclaves(self) -> list[str]:
        """Every enclave the keystore must hold for this graph, in start order, the launcher's last."""
        return [n.enclave for n in self.nodes if n.enclave] + ([self.launcher_enclave] if self.secured else [])

    def security_environment(self) -> dict[str, str]:
        """What rcl reads to secure every participant (the keystore itself comes from the
        operator's ROS_SECURITY_KEYSTORE)."""
        return dict(SECURITY_ENVIRONMENT) if self.secured else {}


SECURITY_ENVIRONMENT = {"ROS_SECURITY_ENABLE": "true", "ROS_SECURITY_STRATEGY": "Enforce"}
"""security:=true: every participant authenticates and encrypts, and one without its enclave's
keys fails to start instead of joining in the clear (Enforce, not Permissive)."""
LAUNCHER_ENCLAVE = "egomimic_launcher"


def enclave_of(namespace: str, name: str) -> str:
    ns = namespace.strip("/")
    return f"/{ns}/{name}" if ns else f"/{name}"


class LaunchArgumentError(ValueError):
    """A launch argument is unknown or has a value outside its choices."""


MAX_INJECTED_LATENCY_MS = 60_000.0
"""inject_latency_ms above a minute rehearses nothing but a dead server."""


def resolve_arguments(overrides: dict[str, str]) -> dict[str, str]:
    known = {a.name: a for a in LAUNCH_ARGUMENTS}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise LaunchArgumentError(f"unknown launch argument(s) {unknown}; known: {sorted(known)}")
    args = {a.name: overrides.get(a.name, a.default) for a in LAUNCH_ARGUMENTS}
    for name, value in args.items():
        choices = known[name].choices
        if choices and value not in choices:
            raise LaunchArgumentError(f"{name}:={value!r} is not one of {list(choices)}")
    if args["camera_backend"] == "":
        args["camera_backend"] = "synthetic" if args["backend"] == "sim" else "hardware"
    if args["auto_arm"] == "":
        args["auto_arm"] = "true" if args["backend"] == "sim" else "false"
    if args["params_file"] and not Path(args["params_file"]).is_file():
        raise LaunchArgumentError(f"params_file:={args['params_file']!r} does not exist")
    if args["camera_backend"] == "replay":
        if not args["replay_path"]:
            raise LaunchArgumentError("camera_backend:=replay needs replay_path:=<episode.zarr or image directory>")
        if not Path(args["replay_path"]).exists():
            raise LaunchArgumentError(f"replay_path:={args['replay_path']!r} does not exist")
        args["replay_path"] = str(Path(args["replay_path"]).resolve())
    for name in ("control_cpus", "stack_cpus"):
        if args[name].strip():
            try:
                online_cpu_list(args[name])
            except ValueError as exc:
                raise LaunchArgumentError(f"{name}:={exc}") from None
    if not args["task_name"].strip():
        raise LaunchArgumentError("task_name:= must not be empty")
    if not args["record_dir"].strip():
        raise LaunchArgumentError("record_dir:= must name a directory")
    args["record_dir"] = str(Path(args["record_dir"]).expanduser().resolve())  # the nodes' cwd may differ
    if not args["bag_dir"].strip():
        raise LaunchArgumentError("bag_dir:= must name a directory")
    args["bag_dir"] = str(Path(args["bag_dir"]).expanduser().resolve())
    pins = {name: args[name].strip().lower() for name in ("policy_sha256", "config_sha256") if args[name].strip()}
    if len(set(pins.values())) > 1:
        raise LaunchArgumentError(f"policy_sha256 and config_sha256 name two different pins: {pins}")
    for name, pin in pins.items():
        if not re.fullmatch(r"[0-9a-f]{64}", pin):
            raise LaunchArgumentError(f"{name}:={args[name]!r} is not a SHA-256 (64 hex digits)")
    args["policy_sha256"] = args["config_sha256"] = next(iter(pins.values()), "")
    try:
        seed = int(args["task_seed"])
    except ValueError:
        raise LaunchArgumentError(f"task_seed:={args['task_seed']!r} is not an integer") from None
    low, high = next(f for f in fields(CameraNodeConfig) if f.name == "task_seed").metadata["range"]
    if not low <= seed <= high:
        raise LaunchArgumentError(f"task_seed:={seed} is outside [{low}, {high}]")
    if seed == -1 and args["policy"].strip() == "expert":
        seed = 0
    if seed >= 0 and args["camera_backend"] != "synthetic":
        raise LaunchArgumentError(
            f"task_seed:={seed} needs the synthetic cameras (the box exists only in their images), "
            f"not camera_backend {args['camera_backend']}"
        )
    args["task_seed"] = str(seed)
    try:
        latency = float(args["inject_latency_ms"])
    except ValueError:
        raise LaunchArgumentError(f"inject_latency_ms:={args['inject_latency_ms']!r} is not a number") from None
    if not 0.0 <= latency <= MAX_INJECTED_LATENCY_MS:
        raise LaunchArgumentError(
            f"inject_latency_ms:={args['inject_latency_ms']} must be within [0, {MAX_INJECTED_LATENCY_MS:g}] ms"
        )
    ns = args["namespace"].strip("/")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*(/[A-Za-z][A-Za-z0-9_]*)*", ns):
        raise LaunchArgumentError(
            f"namespace:={args['namespace']!r} is not a ROS namespace: letters, digits and underscores, starting "
            "with a letter (e.g. eva, lab_eva)"
        )
    if not args["web_port"].isdigit() or int(args["web_port"]) > 65535:
        raise LaunchArgumentError(f"web_port:={args['web_port']!r} is not a port number (0-65535)")
    return args


def build_graph(overrides: dict[str, str] | None = None) -> Graph:
    """The node list for these launch arguments, in start order."""
    args = resolve_arguments(overrides or {})
    ns = args["namespace"].strip("/")
    yaml_files = {
        "params_files": (str(CONFIG_DIR / f"eva_{args['backend']}.yaml"),),
        "override_files": (args["params_file"],) if args["params_file"] else (),
    }
    nodes: list[NodeSpec] = []
    if args["bag"] == "true":
        # First: teardown runs in reverse, so the bag closes after every other node's last message
        # (the gate's final status, the drivers' holds) and also holds the start-up. Not required
        # (a bag that fails must not stop the arms); stack tier, like the recorder: it must never
        # delay the command path.
        nodes.append(
            NodeSpec(
                "bag",
                f"{NODE_PACKAGE}.bag_node",
                ns,
                {"bag_dir": args["bag_dir"], "images": args["bag_images"] == "true"},
                **yaml_files,
                required=False,
                priority="stack" if args["realtime"] == "true" else "",
                cpus=args["stack_cpus"],
                description=f"rosbag2 (MCAP) recorder -> {args['bag_dir']}",
            )
        )
    for arm in (a.value for a in ARMS):
        nodes.append(
            NodeSpec(
                f"driver_{arm}",
                f"{NODE_PACKAGE}.driver_node",
                ns,
                {"arm": arm, "backend": args["backend"]},
                **yaml_files,
                lifecycle=True,
                priority="nice" if args["realtime"] == "true" else "",
                cpus=args["control_cpus"],
                description=f"ARX5 driver, {arm} arm ({args['backend']} backend)",
            )
        )
    # frames is a hop of the command path (policy/action -> command/proposed), so it runs at the
    # path tier (SCHED_FIFO below the gate; spin.PATH_FIFO_PRIORITY): a command that waits
    # behind the cameras or the observers arrives late at the gate.
    nodes.append(
        NodeSpec(
            "frames",
            f"{NODE_PACKAGE}.frames_node",
            ns,
            {},
            **yaml_files,
            priority="path" if args["realtime"] == "true" else "",
            cpus=args["control_cpus"],
            description="hardware <-> dataset frame conversion",
        )
    )
    cameras = CAMERAS
    camera_backend = args["camera_backend"]
    # With record:=true the cameras we start also publish each frame as the episode's JPEG and the
    # recorder stores those bytes (image_transport compressed: one encode per frame, not a raw
    # receive and a second encode in the recorder; egomimic_data/jpeg_frame.py); the web view
    # then passes those JPEGs through too.
    jpeg_once = args["record"] == "true" and camera_backend != "external"
    jpeg = {"publish_compressed": True, "jpeg_quality": RecorderConfig().jpeg_quality} if jpeg_once else {}
    if camera_backend in ("synthetic", "replay"):
        # One process serves all three (one render/decode loop per camera, cameras in step;
        # on 2 cores every process counts): see camera_node's docstring.
        params = {"cameras": list(cameras), "backend": camera_backend, **jpeg}
        if int(args["task_seed"]) >= 0:
            params["task_seed"] = int(args["task_seed"])
        if camera_backend == "replay":
            params["replay_path"] = args["replay_path"]
        nodes.append(
            NodeSpec(
                "cameras",
                f"{NODE_PACKAGE}.camera_node",
                ns,
                params,
                **yaml_files,
                # The control tier: the gate requires every camera's frames fresh (100 ms), so a
                # starved camera is a HOLD. 7 + 7 alternated `make run`s on the loaded 2-core VM:
                # at -5 6 passed and camera stall reports had median 9 (7-46); at -2 5 passed
                # (both failures STALE_CAMERA), median 65 (5-337); joint_states' and
                # policy/action's worst gaps were no longer at -5 (README, realtime).
                priority="nice" if args["realtime"] == "true" else "",
                cpus=args["stack_cpus"],
                description=f"{camera_backend} cameras front_1, left_wrist, right_wrist",
            )
        )
    elif camera_backend != "external":
        # Hardware: one process per camera, so a stuck USB driver takes down one stream only.
        for cam in cameras:
            cam_backend = ARX5_CAMERA_BACKENDS[cam] if camera_backend == "hardware" else camera_backend
            nodes.append(
                NodeSpec(
                    f"camera_{cam}",
                    f"{NODE_PACKAGE}.camera_node",
                    ns,
                    {"cameras": [cam], "backend": cam_backend, **jpeg},
                    **yaml_files,
                    priority="stack" if args["realtime"] == "true" else "",
                    cpus=args["stack_cpus"],
                    description=f"camera {cam} ({cam_backend})",
                )
            )
    # Observers (rviz's nodes, the web view) start before the gate: a process that
    # joins the graph makes DDS busy with discovery for a moment, and one that joined after arming
    # delayed the gate's camera input past its 300 ms limit (a HOLD 2.4 s after arming, web:=true
    # in a fresh-clone run). Before the gate, arming waits for that discovery to settle
    # (graph_settle). None of them is required or on the control path.
    if args["viz"] == "true" or args["web"] == "true":
        # TF, the robot description and the markers for rviz (robot_state_publisher's and a monitor's
        # job). Off the control path: not required, normal priority (below the stack's tier), no
        # CPU pinning; they only read the graph.
        nodes.append(
            NodeSpec(
                "robot_state",
                f"{NODE_PACKAGE}.robot_state_node",
                ns,
                {"urdf_path": str(PACKAGE_DIR / "urdf" / "eva.urdf")},
                **yaml_files,
                required=False,
                description="TF (/tf, /tf_static) and robot_description from urdf/eva.urdf",
            )
        )
        nodes.append(
            NodeSpec(
                "monitor",
                f"{NODE_PACKAGE}.monitor_node",
                ns,
                {},
                **yaml_files,
                required=False,
                description="rviz markers (viz/markers): poses, chunk, gate state, workspace boxes",
            )
        )
    if args["web"] == "true":
        # Off the control path like viz's nodes: a reader only, not required, normal priority.
        nodes.append(
            NodeSpec(
                "webview",
                f"{NODE_PACKAGE}.webview_node",
                ns,
                {
                    "host": args["web_host"],
                    "port": int(args["web_port"]),
                    **({"image_transport": "compressed"} if jpeg_once else {}),
                },
                **yaml_files,
                required=False,
                description=f"web view (Foxglove WebSocket) on ws://{args['web_host']}:{args['web_port']}",
            )
        )
    if args["record"] == "true":
        # Before the gate, like the observers: its start-up (imports, three image readers joining
        # the graph) once ran while the gate was ARMED and starved the cameras past the gate's
        # 100 ms limit (a STALE_CAMERA HOLD within 2.5 s of arming in four of six fresh-clone
        # make runs). auto_start opens the episode once the policy's stream is live, and
        # stop_first ends it while every stream still runs. Not required: a recorder that dies
        # must not stop the arms mid-task (the summary and the launcher's log say it exited).
        # Stack tier: it must never delay the command path.
        nodes.append(
            NodeSpec(
                "recorder",
                f"{NODE_PACKAGE}.recorder_node",
                ns,
                {
                    "auto_start": True,
                    "image_transport": "compressed" if jpeg_once else "raw",
                    "record_dir": args["record_dir"],
                    "task_name": args["task_name"],
                    "task_description": args["task_description"],
                },
                **yaml_files,
                required=False,
                stop_first=True,
                priority="stack" if args["realtime"] == "true" else "",
                cpus=args["stack_cpus"],
                description=f"episode recorder -> {args['record_dir']}",
            )
        )
    # The gate starts after the cameras and drivers, so arming (which needs fresh state and
    # camera health) can succeed at once; before the policy, so ARMING sees its first command.
    nodes.append(
        NodeSpec(
            "safety_gate",
            f"{NODE_PACKAGE}.gate_node",
            ns,
            {
                "required_cameras": list(cameras),
                # a stock driver has no health topic: the gate reads its images' stamps
                "camera_liveness": "image_stamps" if camera_backend == "external" else "health_reports",
                "unsafe_limits": args["unsafe_limits"] == "true",
            },
            **yaml_files,
            arm_after=True,
            priority="fifo" if args["realtime"] == "true" else "",
            cpus=args["control_cpus"],
            description="safety gate (only publisher of joint commands)",
        )
    )
    if args["policy"] != "none":
        # The policy's 30 Hz tick is a hop of the command path: its process runs at the drivers'
        # priority, its tick and action writer at the path tier (SCHED_FIFO below the gate:
        # policy_node.path_tier_threads) and its model worker at the stack's
        # (policy_node._lower_worker). A soak beside a CPU hog at -2 saw one 85 ms gap between
        # actions.
        nodes.append(
            NodeSpec(
                "policy",
                f"{NODE_PACKAGE}.policy_node",
                ns,
                {
                    "policy": args["policy"],
                    "inject_latency_ms": float(args["inject_latency_ms"]),
                    "config_sha256": args["policy_sha256"],
                    "allow_cpu_policy": args["allow_cpu_policy"] == "true",
                    **({"expert.task_seed": int(args["task_seed"])} if int(args["task_seed"]) >= 0 else {}),
                },
                **yaml_files,
                priority="nice" if args["realtime"] == "true" else "",
                cpus=args["stack_cpus"],
                description=f"policy ({args['policy']})",
            )
        )
    if args["security"] == "true":
        nodes = [replace(n, enclave=enclave_of(ns, n.name)) for n in nodes]
    return Graph(tuple(nodes), ns, args["auto_arm"] == "true", args)
