"""Typed error of checkpoint loading and preparation."""

from egomimic_hw.errors import ConfigError


class CheckpointError(ConfigError):
    """A checkpoint cannot be used as asked: malformed, unsupported, pin mismatch, unknown ids.
    A ConfigError (and so a ValueError): the fix is a different file or setting, not a retry."""
