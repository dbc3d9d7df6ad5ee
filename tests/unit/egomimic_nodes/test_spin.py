"""Scheduling helpers of egomimic_nodes.spin, in a child process (they change its priority)."""

import pytest

from .child import run_python


def test_a_thread_lowers_itself_to_the_stack_tier_and_the_process_keeps_its_own():
    code = (
        "import os, threading\n"
        "from egomimic_nodes.spin import STACK_NICENESS, lower_this_thread\n"
        "os.setpriority(os.PRIO_PROCESS, 0, STACK_NICENESS - 3)\n"  # the control tier (needs root or CAP_SYS_NICE)
        "out = {}\n"
        "def worker():\n"
        "    out['did'] = lower_this_thread('stack')\n"
        "    out['worker'] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "    out['again'] = lower_this_thread('stack')\n"
        "t = threading.Thread(target=worker, name='model'); t.start(); t.join()\n"
        "print(out['did'], '|', out['worker'], '|', out['again'] or 'nothing', '|',\n"
        "      os.getpriority(os.PRIO_PROCESS, 0), '|', STACK_NICENESS)\n"
    )
    out = run_python(code)
    if "Permission denied" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip("raising a priority needs root or CAP_SYS_NICE here")
    assert out.returncode == 0, out.stderr
    did, worker, again, main, stack = (x.strip() for x in out.stdout.split("|"))
    assert did == f"thread model: niceness {stack}" and int(worker) == int(stack)
    assert again == "nothing", "already at the tier: nothing to do"
    assert int(main) == int(stack) - 3, "the process (its tick) keeps the control tier"


def test_freeze_heap_leaves_nothing_for_a_full_collection_to_walk():
    code = (
        "import gc\n"
        "import egomimic_nodes.policy_node, torch\n"  # the biggest heap of the graph
        "from egomimic_nodes.spin import freeze_heap\n"
        "before = len(gc.get_objects())\n"
        "freeze_heap()\n"
        "gc.collect()\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = out.stdout.split()
    assert int(frozen) >= int(before) // 2 and int(tracked) < 1000, out.stdout


def test_the_middleware_threads_are_raised_to_the_control_tier_and_the_rest_stay():
    """A process of the stack tier (and the launcher) raises only its Fast DDS threads."""
    code = (
        "import os, rclpy\n"
        "from rclpy.node import Node\n"
        "from egomimic_nodes.spin import PRIORITY_NICENESS, STACK_NICENESS, raise_middleware_threads\n"
        "os.setpriority(os.PRIO_PROCESS, 0, STACK_NICENESS)\n"
        "rclpy.init(domain_id=0)\n"
        "node = Node('raise_test', start_parameter_services=False)\n"
        "did = raise_middleware_threads()\n"
        "prio = {}\n"
        "for tid in os.listdir('/proc/self/task'):\n"
        "    name = open(f'/proc/self/task/{tid}/comm').read().strip()\n"
        "    prio[name + '#' + tid] = os.getpriority(os.PRIO_PROCESS, int(tid))\n"
        "print(repr(did)); print(repr(raise_middleware_threads())); print(PRIORITY_NICENESS, STACK_NICENESS); print(prio)\n"
        "print(os.getpriority(os.PRIO_PROCESS, 0))\n"
        "node.destroy_node(); rclpy.shutdown()\n"
    )
    out = run_python(code)
    if "Permission denied" in out.stderr or "Operation not permitted" in out.stderr:
        pytest.skip("raising a priority needs root or CAP_SYS_NICE here")
    assert out.returncode == 0, out.stderr
    did, again, tiers, prio, main = out.stdout.strip().splitlines()
    control, stack = map(int, tiers.split())
    prio = eval(prio)
    dds = {k: v for k, v in prio.items() if k.startswith("dds.")}
    assert any(k.startswith("dds.shm.") or k.startswith("dds.udp.") for k in dds), f"no receive thread seen: {prio}"
    assert set(dds.values()) == {control}, dds
    assert int(main) == stack, "the node's own (main) thread keeps the stack tier"
    assert f"{len(dds)} middleware thread(s) at niceness {control}" in did
    assert again == "''", "nothing left to raise"
