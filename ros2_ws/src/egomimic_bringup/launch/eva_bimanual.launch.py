"""Launch EVA under a real ROS 2 install: `ros2 launch egomimic_bringup eva_bimanual.launch.py`.

A thin, one-to-one mapping of egomimic_bringup.graph (THE graph definition) onto launch_ros
actions, so both launchers start the same nodes with the same parameters. It cannot run in the
pip-only environment (no `launch`/`launch_ros` wheels exist); `egomimic-launch` runs the same
graph there. Keep this file free of logic: anything about the graph belongs in graph.py.

Differences by construction: under ros2 launch, lifecycle nodes are started as LifecycleNode
and brought to active by `autostart`-style events below; auto_arm is left to the operator
(`ros2 service call /eva/safety/arm std_srvs/srv/Trigger`).
"""

import tempfile
from pathlib import Path

from egomimic_bringup.graph import LAUNCH_ARGUMENTS, build_graph


def generate_launch_description():
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, Shutdown

    from launch import LaunchDescription

    def nodes(context):
        from launch_ros.actions import LifecycleNode, Node

        overrides = {a.name: context.perform_substitution(_config(a.name)) for a in LAUNCH_ARGUMENTS}
        graph = build_graph(overrides)
        params_dir = Path(tempfile.mkdtemp(prefix="egomimic_launch_params_"))
        actions = []
        for spec in graph.nodes:
            package, executable = spec.module.split(".")  # console script = module name
            kwargs = dict(
                package=package,
                executable=executable,
                name=spec.name,
                namespace=spec.namespace,
                parameters=[
                    *spec.params_files,
                    str(spec.write_launch_params(params_dir)),
                    *spec.override_files,
                ],  # params_file last
                output="screen",
                additional_env={"EGOMIMIC_PRIORITY": spec.priority, "EGOMIMIC_CPUS": spec.cpus},
            )
            if spec.required:
                kwargs["on_exit"] = Shutdown(reason=f"required node {spec.name} exited")
            if spec.lifecycle:
                actions.append(LifecycleNode(autostart=True, **kwargs))
            else:
                actions.append(Node(**kwargs))
        return actions

    def _config(name):
        from launch.substitutions import LaunchConfiguration

        return LaunchConfiguration(name)

    return LaunchDescription(
        [DeclareLaunchArgument(a.name, default_value=a.default, description=a.description) for a in LAUNCH_ARGUMENTS]
        + [OpaqueFunction(function=nodes)]
    )


def egomimic_graph(overrides):
    """Entry point for `egomimic-launch`: the same graph, without launch_ros."""
    return build_graph(overrides)
