"""Whether the ARX SDK wheel imports here, for tests that need it (CPython 3.11 x86_64 only)."""

import pytest

from egomimic_hw.errors import BackendUnavailable
from egomimic_hw.kinematics import import_arx5


def _sdk_missing() -> str:
    try:
        import_arx5()
    except BackendUnavailable as exc:
        return str(exc)
    return ""


SDK_MISSING = _sdk_missing()
"""Why the SDK cannot be used here, or "" where it can."""

requires_sdk = pytest.mark.skipif(bool(SDK_MISSING), reason=f"needs the ARX SDK: {SDK_MISSING}")
