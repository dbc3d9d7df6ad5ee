"""Typed errors of egomimic_hw: each subclasses a builtin so callers can catch either."""


class EgomimicHwError(Exception):
    """Base of every error raised by egomimic_hw."""


class ConfigError(EgomimicHwError, ValueError):
    """A configuration value is invalid; the message names the field, the value and the fix."""


class PoseError(EgomimicHwError, ValueError):
    """A pose or rotation is malformed (wrong shape, non-finite, not a rotation)."""


class BackendUnavailable(EgomimicHwError, RuntimeError):
    """A hardware backend cannot start here (library, bus or device missing)."""
