"""Build diagnostic_msgs/DiagnosticArray entries (the standard /diagnostics health channel)."""

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


def array(node, *statuses: DiagnosticStatus) -> DiagnosticArray:
    msg = DiagnosticArray()
    msg.header.stamp = node.get_clock().now().to_msg()
    msg.status = list(statuses)
    return msg
