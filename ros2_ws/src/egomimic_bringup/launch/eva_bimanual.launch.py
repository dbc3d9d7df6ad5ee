"""Launch EVA under a ROS 2 install: `ros2 launch egomimic_bringup eva_bimanual.launch.py [arg:=value ...]`.

The same graph as `egomimic-launch` (pip world), from the same definition: egomimic_bringup.graph
gives the nodes, their parameters and their start order; egomimic_launch.environment the DDS
environment; egomimic_launch.steps the steps between starts. This file only maps them onto
launch / launch_ros actions, with the API that Jazzy and Kilted share:

- environment: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, ROS_DOMAIN_ID=42 and the shipped Fast DDS
  profile, each unless already set (as egomimic-launch);
- arguments: every one of graph.LAUNCH_ARGUMENTS, with its choices; checked by graph.build_graph
  (a bad value stops the launch with one line naming it);
- start order: each node starts once the one before it is up. A lifecycle node (the drivers) is
  configured when its process starts and activated once inactive (ChangeState events and
  OnStateTransition handlers: the pattern both distributions have; LifecycleNode(autostart=True)
  exists only from Kilted on); up = active. Any other node is up once it is in the ROS graph
  (`python -m egomimic_launch.steps wait-node`);
- auto_arm: after the gate is up, `steps arm` waits for a settled graph and calls safety/arm, and
  the policy starts after it, so the policy's first command is the one checked against the
  start pose;
- a required node that exits (outside shutdown) gets `steps estop` (the gate latches an e-stop:
  the arms hold, motors on), then the launch shuts down. A node that fails to come up ends the
  launch the same way.

Not the same as egomimic-launch, by what `ros2 launch` is: teardown on Ctrl-C signals every node
at once (egomimic-launch stops them in reverse start order and disarms first; the gate holds
and the drivers hold on their own exit either way), there is no heartbeat watch of a node that
hangs without exiting, no run summary and no --trials. ROS logs go to ROS_LOG_DIR as usual.

`egomimic_graph(overrides)` is the entry point `egomimic-launch` reads.
"""

import os
import sys
import tempfile
from pathlib import Path

from egomimic_bringup.graph import LAUNCH_ARGUMENTS, LaunchArgumentError, build_graph

STEPS_MODULE = "egomimic_launch.steps"


def generate_launch_description():
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    from launch import LaunchDescription

    arguments = [
        DeclareLaunchArgument(
            a.name,
            default_value=a.default,
            description=a.description,
            **({"choices": list(a.choices)} if a.choices else {}),
        )
        for a in LAUNCH_ARGUMENTS
    ]
    return LaunchDescription(
        [*arguments, OpaqueFunction(function=_environment), OpaqueFunction(function=_graph_actions)]
    )


def _environment(context):
    """The DDS variables egomimic-launch sets, each unless the launch's environment has it."""
    from launch.actions import SetEnvironmentVariable

    from egomimic_launch.environment import DDS_VARIABLES, ros_environment

    env = ros_environment(dict(context.environment))
    return [SetEnvironmentVariable(key, env[key]) for key in DDS_VARIABLES if key in env]


def _step(step: str, namespace: str, *args: str, name: str, graph):
    """One launch step as a process; with security:=true it joins with the launcher's enclave."""
    from launch.actions import ExecuteProcess

    enclave = ["--enclave", graph.launcher_enclave] if graph.launcher_enclave else []
    return ExecuteProcess(
        cmd=[sys.executable, "-m", STEPS_MODULE, *enclave, step, "--namespace", namespace, *args],
        name=name,
        output="screen",
        additional_env=graph.security_environment(),
    )


def _graph_actions(context):
    """The nodes of graph.build_graph for this launch's arguments, chained in start order."""
    from launch.actions import EmitEvent, LogInfo, RegisterEventHandler, Shutdown
    from launch.event_handlers import OnProcessExit, OnProcessStart
    from launch.events import matches_action
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import LifecycleNode, Node
    from launch_ros.event_handlers import OnStateTransition
    from launch_ros.events.lifecycle import ChangeState
    from lifecycle_msgs.msg import Transition

    overrides = {a.name: LaunchConfiguration(a.name).perform(context) for a in LAUNCH_ARGUMENTS}
    graph = build_graph(overrides)  # LaunchArgumentError: one line naming the argument
    from egomimic_launch import params_check

    files = dict.fromkeys(f for spec in graph.nodes for f in (*spec.params_files, *spec.override_files))
    problems = [line for f in files for line in params_check.check(f, graph)]
    if problems:  # before any node starts, as egomimic-launch
        raise LaunchArgumentError("; ".join(problems))
    ns = graph.namespace
    params_dir = Path(tempfile.mkdtemp(prefix="egomimic_launch_params_"))
    launcher_pid = str(os.getpid())

    def safe_stop(why: str):
        """E-stop through the gate, then shut the launch down."""
        estop = _step("estop", ns, "--reason", why, name="egomimic_estop", graph=graph)
        return [
            LogInfo(msg=f"[launch] SAFE STOP: {why}"),
            RegisterEventHandler(OnProcessExit(target_action=estop, on_exit=[Shutdown(reason=why)])),
            estop,
        ]

    def on_required_exit(name: str):
        def handler(event, ctx):
            if ctx.is_shutdown:
                return None  # an orderly stop: nothing died
            return safe_stop(f"required node {name} exited with code {event.returncode}")

        return handler

    actions = []
    if graph.unsafe_limits:  # as egomimic-launch: every value above its safe maximum, in the log
        above = [line for f in files for line in params_check.unsafe_values(f, graph)]
        actions.append(
            LogInfo(
                msg=f"[launch] UNSAFE LIMITS (unsafe_limits:=true): set above their safe maxima: {'; '.join(above) or 'none'}"
            )
        )
    starts = []  # per node, the actions that start it
    ready = []  # per node, a function registering `next_actions` to run once the node is up
    for spec in graph.nodes:
        package, executable = spec.module.split(".")  # console script = module name (setup.py)
        kwargs = dict(
            package=package,
            executable=executable,
            name=spec.name,
            namespace=f"/{ns}" if ns else "",
            parameters=[*spec.params_files, str(spec.write_launch_params(params_dir)), *spec.override_files],
            output="screen",
            additional_env={
                "EGOMIMIC_LAUNCHER_PID": launcher_pid,
                "EGOMIMIC_PRIORITY": spec.priority,
                "EGOMIMIC_CPUS": spec.cpus,
                **graph.security_environment(),
            },
        )
        if spec.enclave:
            kwargs["ros_arguments"] = ["--enclave", spec.enclave]  # security:=true (SROS2)
        node = LifecycleNode(**kwargs) if spec.lifecycle else Node(**kwargs)
        if spec.required:
            actions.append(RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_required_exit(spec.name))))
        if spec.lifecycle:
            actions.append(
                RegisterEventHandler(
                    OnProcessStart(
                        target_action=node,
                        on_start=[
                            EmitEvent(
                                event=ChangeState(
                                    lifecycle_node_matcher=matches_action(node),
                                    transition_id=Transition.TRANSITION_CONFIGURE,
                                )
                            )
                        ],
                    )
                )
            )
            actions.append(
                RegisterEventHandler(
                    OnStateTransition(
                        target_lifecycle_node=node,
                        goal_state="inactive",
                        entities=[
                            EmitEvent(
                                event=ChangeState(
                                    lifecycle_node_matcher=matches_action(node),
                                    transition_id=Transition.TRANSITION_ACTIVATE,
                                )
                            )
                        ],
                    )
                )
            )
            for start_state, goal_state, step in (
                ("configuring", "unconfigured", "configure"),
                ("activating", "inactive", "activate"),
            ):
                actions.append(
                    RegisterEventHandler(
                        OnStateTransition(
                            target_lifecycle_node=node,
                            start_state=start_state,
                            goal_state=goal_state,
                            entities=safe_stop(f"{spec.name}: {step} failed (see its log)"),
                        )
                    )
                )

            def when_up(next_actions, node=node):
                return RegisterEventHandler(
                    OnStateTransition(target_lifecycle_node=node, goal_state="active", entities=next_actions)
                )
        else:

            def when_up(next_actions, node=node, spec=spec):
                waiter = _step("wait-node", ns, "--name", spec.name, name=f"egomimic_wait_{spec.name}", graph=graph)

                def after_wait(event, ctx):
                    if ctx.is_shutdown:
                        return None
                    if event.returncode != 0:
                        return safe_stop(f"{spec.name} did not appear in the ROS graph")
                    return next_actions

                return [
                    RegisterEventHandler(OnProcessStart(target_action=node, on_start=[waiter])),
                    RegisterEventHandler(OnProcessExit(target_action=waiter, on_exit=after_wait)),
                ]

        if spec.arm_after and graph.auto_arm:

            def when_up(next_actions, inner=when_up):
                arm = _step("arm", ns, name="egomimic_arm", graph=graph)

                def after_arm(event, ctx):
                    return None if ctx.is_shutdown else next_actions

                return inner([RegisterEventHandler(OnProcessExit(target_action=arm, on_exit=after_arm)), arm])

        starts.append([node])
        ready.append(when_up)
    # Chain from the last node back: node i+1 (with its own chain) starts once node i is up.
    then = [LogInfo(msg=f"[launch] all {len(graph.nodes)} nodes up")]
    for i in range(len(graph.nodes) - 1, -1, -1):
        registered = ready[i](then)
        then = [*(registered if isinstance(registered, list) else [registered]), *starts[i]]
    return [*actions, *then]


def egomimic_graph(overrides):
    """Entry point for `egomimic-launch`: the same graph, without launch_ros."""
    return build_graph(overrides)
