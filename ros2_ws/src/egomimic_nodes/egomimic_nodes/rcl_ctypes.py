"""The few rcl and rcutils types and libraries that this package calls through ctypes.

Why ctypes: rclpy keeps Python's GIL through its publish, take and entity-creation calls (its
wait set releases it), and such a call that waits in the middleware (a send into, or a take
beside, a shared-memory port that a stopped process holds) then stops every thread of the node.
A function loaded with ctypes.CDLL runs without the GIL.
Used by outbox.py (publish), taken.py (take) and graph_refresh.py (publisher create/destroy).
"""

from __future__ import annotations

import ctypes
import ctypes.util


class Allocator(ctypes.Structure):
    """rcutils_allocator_t."""

    _fields_ = [
        ("allocate", ctypes.c_void_p),
        ("deallocate", ctypes.c_void_p),
        ("reallocate", ctypes.c_void_p),
        ("zero_allocate", ctypes.c_void_p),
        ("state", ctypes.c_void_p),
    ]


class SerializedMessage(ctypes.Structure):
    """rcl_serialized_message_t (rcutils_uint8_array_t): CDR bytes at `buffer` (an address)."""

    _fields_ = [
        ("buffer", ctypes.c_void_p),
        ("buffer_length", ctypes.c_size_t),
        ("buffer_capacity", ctypes.c_size_t),
        ("allocator", Allocator),
    ]


class ErrorString(ctypes.Structure):
    """rcutils_error_string_t: one char[RCUTILS_ERROR_MESSAGE_MAX_LENGTH] (1024)."""

    _fields_ = [("text", ctypes.c_char * 1024)]


def loaded_library(stem: str) -> str | None:
    """The path of lib<stem>.so as this process already mapped it (rclpy loaded it), so a ROS
    install under /opt/ros and this venv resolve alike."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if path.rsplit("/", 1)[-1].startswith(f"lib{stem}.so"):
                    return path
    except OSError:
        pass
    return ctypes.util.find_library(stem)


def rcutils_errors():
    """rcutils with its error-string calls typed: (lib, get_error_string, reset_error)."""
    import rclpy.impl.implementation_singleton  # noqa: F401 - loads rcl and rcutils into this process

    lib = ctypes.CDLL(loaded_library("rcutils"))
    lib.rcutils_get_error_string.argtypes = []
    lib.rcutils_get_error_string.restype = ErrorString
    lib.rcutils_reset_error.argtypes = []
    lib.rcutils_reset_error.restype = None
    return lib, lib.rcutils_get_error_string, lib.rcutils_reset_error
