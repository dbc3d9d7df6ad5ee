"""A minimal stand-in of the `launch` / `launch_ros` API surface that eva_bimanual.launch.py uses,
and a small launch service that runs a launch description against a simulated world.

Why: no `launch` or `launch_ros` wheel exists here, yet the launch file must start the same graph
as egomimic-launch. The stand-in keeps the semantics the comparison depends on, as launch_ros
implements them (ros2/launch, ros2/launch_ros, Jazzy/Kilted):
- DeclareLaunchArgument: the default must be one of `choices`, and a given value too (else the
  launch fails naming the argument); LaunchConfiguration(name).perform reads the value.
- SetEnvironmentVariable changes the launch's environment; every process started afterwards
  inherits it, plus its own additional_env.
- Node / LifecycleNode: the command is `<prefix>/lib/<package>/<executable> --ros-args -r
  __node:=<name> -r __ns:=<namespace> --params-file <file> ...` (parameter files in order); the
  executable must be where launch_ros looks for it (the package's setup.cfg puts console
  scripts in lib/<package>, which this checks).
- Event handlers: OnProcessStart / OnProcessExit (entities, or a callable(event, context)),
  launch_ros OnStateTransition (start_state / goal_state), ChangeState events that reach a
  lifecycle node through its matcher; events are handled in order of emission.
- Shutdown sets `context.is_shutdown`; nothing is started after it.

The simulated world: processes start; a lifecycle node goes configuring -> inactive on
TRANSITION_CONFIGURE and activating -> active on TRANSITION_ACTIVATE (or fails them when told);
`egomimic_launch.steps` processes exit 0 (or the code the test sets); a test can kill a running
process, which exits with -9.
"""

from __future__ import annotations

import configparser
import os
import sys
import types
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ROS_PACKAGES = {
    "egomimic_nodes": REPO / "ros2_ws" / "src" / "egomimic_nodes",
    "egomimic_bringup": REPO / "ros2_ws" / "src" / "egomimic_bringup",
}
INSTALL_PREFIX = "/opt/eva_ws/install"


class LaunchError(RuntimeError):
    pass


# --- launch -------------------------------------------------------------------------------


class Action:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LaunchDescription:
    def __init__(self, entities):
        self.entities = list(entities)


class DeclareLaunchArgument(Action):
    def __init__(self, name, *, default_value=None, description=None, choices=None):
        super().__init__()
        if choices is not None and default_value is not None and default_value not in choices:
            raise LaunchError(f"default_value {default_value!r} of {name!r} is not in choices {choices}")
        self.name, self.default_value, self.description, self.choices = name, default_value, description, choices


class SetEnvironmentVariable(Action):
    def __init__(self, name, value):
        super().__init__()
        self.name, self.value = name, value


class OpaqueFunction(Action):
    def __init__(self, *, function):
        super().__init__()
        self.function = function


class EmitEvent(Action):
    def __init__(self, *, event):
        super().__init__()
        self.event = event


class LogInfo(Action):
    def __init__(self, *, msg):
        super().__init__()
        self.msg = msg


class RegisterEventHandler(Action):
    def __init__(self, event_handler):
        super().__init__()
        self.handler = event_handler


class Shutdown(Action):
    def __init__(self, *, reason="reason not given"):
        super().__init__()
        self.reason = reason


class ExecuteProcess(Action):
    def __init__(self, *, cmd, name=None, output="log", additional_env=None, **kwargs):
        super().__init__(**kwargs)
        self.cmd, self.name, self.additional_env = list(cmd), name, dict(additional_env or {})


@dataclass
class ProcessStarted:
    action: Action


@dataclass
class ProcessExited:
    action: Action
    returncode: int


class OnProcessStart:
    def __init__(self, *, target_action, on_start):
        self.target, self.entities = target_action, on_start

    def handles(self, event) -> bool:
        return isinstance(event, ProcessStarted) and event.action is self.target


class OnProcessExit:
    def __init__(self, *, target_action, on_exit):
        self.target, self.entities = target_action, on_exit

    def handles(self, event) -> bool:
        return isinstance(event, ProcessExited) and event.action is self.target


def matches_action(action):
    return lambda candidate: candidate is action


class LaunchConfiguration:
    def __init__(self, name):
        self.name = name

    def perform(self, context) -> str:
        if self.name not in context.launch_configurations:
            raise LaunchError(f"launch configuration {self.name!r} does not exist")
        return context.launch_configurations[self.name]


# --- launch_ros ---------------------------------------------------------------------------


def executable_path(package: str, executable: str) -> str:
    """Where launch_ros runs `executable` from: <prefix>/lib/<package>/<executable>. An ament_python
    package puts its console scripts there only with setup.cfg's install_scripts."""
    source = ROS_PACKAGES.get(package)
    if source is None:
        raise LaunchError(f"package {package!r} not found")
    cfg = configparser.ConfigParser()
    cfg.read(source / "setup.cfg")
    wanted = f"$base/lib/{package}"
    for section in ("develop", "install"):
        key = "script_dir" if section == "develop" else "install_scripts"
        if cfg.get(section, key, fallback=None) != wanted:
            raise LaunchError(
                f"libexec directory of {package} does not exist: setup.cfg [{section}] {key} is not {wanted}"
            )
    setup_py = (source / "setup.py").read_text()
    if executable not in setup_py:
        raise LaunchError(f"executable {executable!r} not found in package {package!r}")
    return f"{INSTALL_PREFIX}/{package}/lib/{package}/{executable}"


class Node(ExecuteProcess):
    def __init__(
        self,
        *,
        package,
        executable,
        name=None,
        namespace=None,
        parameters=None,
        remappings=None,
        output="log",
        additional_env=None,
        ros_arguments=None,
        **kwargs,
    ):
        ros_args = ["--ros-args"]
        if name:
            ros_args += ["-r", f"__node:={name}"]
        if namespace:
            ros_args += ["-r", f"__ns:={namespace}"]
        for p in parameters or []:
            if not isinstance(p, (str, os.PathLike)):
                raise LaunchError("the stand-in takes parameter files only")
            ros_args += ["--params-file", str(p)]
        for src, dst in remappings or []:
            ros_args += ["-r", f"{src}:={dst}"]
        ros_args += list(ros_arguments or [])  # launch_ros passes them to rcl as given
        super().__init__(
            cmd=[executable_path(package, executable), *ros_args],
            name=name,
            output=output,
            additional_env=additional_env,
            **kwargs,
        )
        self.package, self.executable, self.node_name, self.node_namespace = package, executable, name, namespace


class LifecycleNode(Node):
    def __init__(self, *, name, namespace, **kwargs):
        if "autostart" in kwargs:
            raise LaunchError("LifecycleNode(autostart=...) exists only from Kilted on")
        super().__init__(name=name, namespace=namespace, **kwargs)
        self.state = "unconfigured"


class ChangeState:
    def __init__(self, *, lifecycle_node_matcher, transition_id):
        self.matcher, self.transition_id = lifecycle_node_matcher, transition_id


@dataclass
class StateTransition:
    action: LifecycleNode
    start_state: str
    goal_state: str


class OnStateTransition:
    def __init__(self, *, target_lifecycle_node, goal_state=None, start_state=None, entities):
        self.target, self.goal_state, self.start_state, self.entities = (
            target_lifecycle_node,
            goal_state,
            start_state,
            entities,
        )

    def handles(self, event) -> bool:
        return (
            isinstance(event, StateTransition)
            and event.action is self.target
            and (self.goal_state is None or event.goal_state == self.goal_state)
            and (self.start_state is None or event.start_state == self.start_state)
        )


def install() -> None:
    """Put the stand-in modules in sys.modules (under the real names the launch file imports)."""

    def module(name: str, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod
        return mod

    module("launch", LaunchDescription=LaunchDescription, __path__=[])
    module(
        "launch.actions",
        DeclareLaunchArgument=DeclareLaunchArgument,
        SetEnvironmentVariable=SetEnvironmentVariable,
        OpaqueFunction=OpaqueFunction,
        EmitEvent=EmitEvent,
        LogInfo=LogInfo,
        RegisterEventHandler=RegisterEventHandler,
        Shutdown=Shutdown,
        ExecuteProcess=ExecuteProcess,
    )
    module("launch.event_handlers", OnProcessStart=OnProcessStart, OnProcessExit=OnProcessExit)
    module("launch.events", matches_action=matches_action)
    module("launch.substitutions", LaunchConfiguration=LaunchConfiguration)
    module("launch_ros", __path__=[])
    module("launch_ros.actions", Node=Node, LifecycleNode=LifecycleNode)
    module("launch_ros.event_handlers", OnStateTransition=OnStateTransition)
    module("launch_ros.events", __path__=[])
    module("launch_ros.events.lifecycle", ChangeState=ChangeState)


def uninstall() -> None:
    for name in [n for n in sys.modules if n == "launch" or n.startswith(("launch.", "launch_ros"))]:
        del sys.modules[name]


# --- the launch service -------------------------------------------------------------------


@dataclass
class Started:
    action: ExecuteProcess
    cmd: list[str]
    env: dict[str, str]
    running: bool = True


@dataclass
class LaunchService:
    """Runs a LaunchDescription: `arguments` as `ros2 launch ... name:=value` gives them."""

    arguments: dict[str, str]
    environment: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    """LaunchContext.environment: os.environ's copy, what SetEnvironmentVariable changes."""
    step_exit_codes: dict[str, int] = field(default_factory=dict)
    """`egomimic_launch.steps` step name -> exit code (default 0)."""
    failing_transitions: set[tuple[str, str]] = field(default_factory=set)
    """(node name, "configure" | "activate") that fail."""
    launch_configurations: dict[str, str] = field(default_factory=dict)
    is_shutdown: bool = False
    shutdown_reason: str = ""
    started: list[Started] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    handlers: list = field(default_factory=list)
    events: deque = field(default_factory=deque)

    def run(self, description: LaunchDescription) -> LaunchService:
        for entity in description.entities:
            self.execute(entity)
        self.drain()
        return self

    def execute(self, entity) -> None:
        if isinstance(entity, DeclareLaunchArgument):
            value = self.arguments.get(entity.name, entity.default_value)
            if value is None:
                raise LaunchError(f"launch argument {entity.name!r} is required")
            if entity.choices is not None and value not in entity.choices:
                raise LaunchError(
                    f"Argument '{entity.name}' provided value '{value}' is not valid. "
                    f"Valid options are: {entity.choices}"
                )
            self.launch_configurations[entity.name] = value
        elif isinstance(entity, SetEnvironmentVariable):
            self.environment[entity.name] = entity.value
        elif isinstance(entity, OpaqueFunction):
            for action in entity.function(self) or []:
                self.execute(action)
        elif isinstance(entity, RegisterEventHandler):
            self.handlers.append(entity.handler)
        elif isinstance(entity, EmitEvent):
            self.events.append(entity.event)
        elif isinstance(entity, LogInfo):
            self.log.append(entity.msg)
        elif isinstance(entity, Shutdown):
            if not self.is_shutdown:
                self.is_shutdown, self.shutdown_reason = True, entity.reason
        elif isinstance(entity, ExecuteProcess):
            if self.is_shutdown:
                return
            env = {**self.environment, **entity.additional_env}
            self.started.append(Started(entity, list(entity.cmd), env))
            self.events.append(ProcessStarted(entity))
            step = self._step_of(entity)
            if step is not None:
                self.events.append(ProcessExited(entity, self.step_exit_codes.get(step, 0)))
        else:
            raise LaunchError(f"the stand-in does not know {type(entity).__name__}")

    @staticmethod
    def _step_of(action: ExecuteProcess) -> str | None:
        cmd = action.cmd
        if "-m" in cmd and cmd[cmd.index("-m") + 1] == "egomimic_launch.steps":
            from egomimic_launch.steps import build_parser

            return build_parser().parse_args(cmd[cmd.index("-m") + 2 :]).step  # the real step's parser accepts it
        return None

    def drain(self) -> None:
        while self.events:
            event = self.events.popleft()
            if isinstance(event, ChangeState):
                self._change_state(event)
                continue
            if isinstance(event, ProcessExited):
                for s in self.started:
                    if s.action is event.action:
                        s.running = False
            for handler in list(self.handlers):
                if handler.handles(event):
                    entities = handler.entities
                    if callable(entities):
                        entities = entities(event, self)
                    for e in entities or []:
                        self.execute(e)

    def _change_state(self, event: ChangeState) -> None:
        from lifecycle_msgs.msg import Transition

        steps = {
            Transition.TRANSITION_CONFIGURE: ("configure", "unconfigured", "configuring", "inactive"),
            Transition.TRANSITION_ACTIVATE: ("activate", "inactive", "activating", "active"),
        }
        for s in self.started:
            node = s.action
            if not (isinstance(node, LifecycleNode) and s.running and event.matcher(node)):
                continue
            name, from_state, via, to_state = steps[event.transition_id]
            if node.state != from_state:
                continue
            if (node.node_name, name) in self.failing_transitions:
                to_state = from_state
            node.state = to_state
            self.events.append(StateTransition(node, via, to_state))

    def kill(self, name: str) -> None:
        """SIGKILL a running node: its process exits with -9."""
        match = [s for s in self.started if getattr(s.action, "node_name", None) == name and s.running]
        if not match:
            raise LaunchError(f"no running node {name!r}")
        self.events.append(ProcessExited(match[0].action, -9))
        self.drain()

    def shutdown(self) -> None:
        """Ctrl-C: launch shuts down, then every process exits."""
        self.is_shutdown, self.shutdown_reason = True, "ctrl-c"
        for s in self.started:
            if s.running:
                self.events.append(ProcessExited(s.action, 0))
        self.drain()

    def sequence(self) -> list[str]:
        """What was started, in order: node names, and `step:<name>` for egomimic_launch.steps."""
        out = []
        for s in self.started:
            step = self._step_of(s.action)
            out.append(f"step:{step}" if step else s.action.name)
        return out


def load_launch_file(path: Path) -> Callable[[], LaunchDescription]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("eva_launch_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description
