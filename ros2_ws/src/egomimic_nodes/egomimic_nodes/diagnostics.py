"""Build diagnostic_msgs/DiagnosticArray entries (the standard /diagnostics health channel).

Every status name carries its node's namespace: `/eva/driver/left`, `/eva/safety_gate`. Two robots
on one domain (namespaces eva_a, eva_b) share /diagnostics; without it their entries would read
the same. Nodes give the local name (`driver/left`); `array` qualifies it; consumers take it
back with `local_name(name, namespace)`."""

from __future__ import annotations

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

OK = DiagnosticStatus.OK
WARN = DiagnosticStatus.WARN
ERROR = DiagnosticStatus.ERROR
STALE = DiagnosticStatus.STALE


def status(name: str, hardware_id: str, level: int, message: str, values: dict) -> DiagnosticStatus:
    return DiagnosticStatus(
        level=level,
        name=name,
        hardware_id=hardware_id,
        message=message,
        values=[KeyValue(key=str(k), value=str(v)) for k, v in values.items()],
    )


def qualified_name(namespace: str, name: str) -> str:
    """`name` under `namespace` ("/eva", "driver/left" -> "/eva/driver/left")."""
    return f"/{namespace.strip('/')}/{name}".replace("//", "/")


def local_name(name: str, namespace: str) -> str | None:
    """The local part of a status name of `namespace`'s nodes; None for another namespace's."""
    prefix = qualified_name(namespace, "")
    return name[len(prefix) :] if name.startswith(prefix) else None


def array(node, *statuses: DiagnosticStatus) -> DiagnosticArray:
    """The statuses, each name qualified with `node`'s namespace, stamped now."""
    msg = DiagnosticArray()
    msg.header.stamp = node.get_clock().now().to_msg()
    for st in statuses:
        st.name = qualified_name(node.get_namespace(), st.name)
    msg.status = list(statuses)
    return msg
