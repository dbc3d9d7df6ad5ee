"""Patched cached checkpoints: prepare a rollout artifact once, in a cache, and reuse it.

Upstream rewrote PI's patched checkpoint NEXT TO the source on every start: slow for multi-GB
files, racy when two rollouts start at once, impossible on a read-only mount. Here:

- the source is only ever read (opened read-only, memory-mapped where possible);
- the artifact lives in a cache directory (`$EGOMIMIC_CACHE_DIR`, else
  `~/.cache/egomimic/checkpoints`), named by a FINGERPRINT of what determines its content:
  canonical SHA-256 of {cache version, compat version, source path, size, mtime_ns, epoch,
  global_step, tensor schema [(key, shape, dtype)], config pin}. A changed source, migration code
  (the caller's compat version) or artifact layout (CACHE_VERSION) gets a new name;
- next to it a JSON marker {fingerprint, compat_version, artifact_size, artifact_sha256, source,
  migrations, ...}; an entry is reused only when the marker parses and matches the fingerprint,
  and the artifact's size (and, by default, SHA-256) match the marker. Anything else (truncated
  artifact, corrupt or foreign marker) is rebuilt and the reason returned;
- a valid entry is reused WITHOUT taking the lock or writing anything (the common start);
- building happens under a per-entry file lock, re-checking after acquiring it, so two processes
  starting together do the work once; artifact and marker are written to temp files, fsynced
  and renamed into place (readers never see half a file), the marker last.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from egomimic_policy.checkpoints.errors import CheckpointError
from egomimic_policy.checkpoints.layout import atomic_torch_save, load_checkpoint, sha256_of, state_schema

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "EGOMIMIC_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/egomimic/checkpoints")
MARKER_VERSION = 1
CACHE_VERSION = 2
"""The layout of every artifact, whatever its family: part of the fingerprint, so an entry written
in another layout is never looked at (it has another name) but prepared again. 2: layout.py's
format_version 2 (`nets.policy.`, config_tree); the entries of 1 (`model.`, model_config) are
left alone for the code that wrote them."""
DEFAULT_LOCK_TIMEOUT_S = 900.0
"""How long a start waits for another process preparing the same entry (multi-GB: minutes)."""


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else DEFAULT_CACHE_DIR.expanduser()


@dataclass(frozen=True)
class PreparedCheckpoint:
    """Where the artifact is and how it got there. `reused`: nothing was written this time.
    `rebuild_reason`: why an existing entry was not reused (None for a fresh or reused one)."""

    artifact_path: Path
    marker_path: Path
    fingerprint: str
    reused: bool
    rebuild_reason: str | None
    marker: Mapping


def _as_json_scalar(value):
    return value if isinstance(value, (int, str)) or value is None else repr(value)


def source_fingerprint(source: Path, ckpt: Mapping, compat_version: str, pin_config_sha256: str | None) -> str:
    st = source.stat()
    return sha256_of(
        {
            "cache_version": CACHE_VERSION,
            "compat_version": compat_version,
            "source_path": str(source),
            "source_size": st.st_size,
            "source_mtime_ns": st.st_mtime_ns,
            "epoch": _as_json_scalar(ckpt.get("epoch")),
            "global_step": _as_json_scalar(ckpt.get("global_step")),
            "state_schema": state_schema(ckpt.get("state_dict") or {}),
            "pin_config_sha256": pin_config_sha256,
        }
    )


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_entry(
    artifact: Path, marker_path: Path, fingerprint: str, compat_version: str, *, verify_sha256: bool
) -> tuple[dict | None, str | None]:
    """(marker, None) when the entry can be reused, else (None, reason). Reads only."""
    if not marker_path.exists() and not artifact.exists():
        return None, None
    try:
        marker = json.loads(marker_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "marker missing"
    except (OSError, ValueError) as exc:
        return None, f"marker unreadable ({type(exc).__name__})"
    if not isinstance(marker, dict):
        return None, "marker is not a JSON object"
    if marker.get("marker_version") != MARKER_VERSION or marker.get("compat_version") != compat_version:
        return None, "marker version or compat version differs"
    if marker.get("fingerprint") != fingerprint:
        return None, "marker fingerprint differs"
    try:
        size = artifact.stat().st_size
    except FileNotFoundError:
        return None, "artifact missing"
    if size == 0 or size != marker.get("artifact_size"):
        return None, f"artifact size {size} != marker {marker.get('artifact_size')}"
    if verify_sha256 and _file_sha256(artifact) != marker.get("artifact_sha256"):
        return None, "artifact SHA-256 differs from the marker"
    return marker, None


def _write_json_atomic(path: Path, value: Mapping) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.partial")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(value, sort_keys=True, indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def entry_stem(source: Path) -> str:
    """The file-name-safe prefix of `source`'s cache entries (`<stem>.rollout-<compat>-<fp>.ckpt`)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", source.stem)[:80]


def _write_failure(cache: Path, exc: BaseException) -> str:
    """One line for a prepared checkpoint that could not be written (a full disk, a file-size
    limit, an I/O error): where, how much room is left, and what to do."""
    try:
        free = f"{shutil.disk_usage(cache).free / 1e6:.0f} MB free there"
    except OSError:
        free = "free space unknown"
    text = str(exc).strip()
    why = getattr(exc, "strerror", None) or (text.splitlines()[0] if text else type(exc).__name__)
    return (
        f"cannot write the prepared checkpoint into the cache {str(cache)!r} ({free}): {why}; "
        f"free some space or set ${CACHE_DIR_ENV} to another directory"
    )


def prepare_cached(
    source_path: str | os.PathLike,
    *,
    compat_version: str,
    prepare: Callable[[dict], tuple[dict, Mapping]],
    cache_dir: str | os.PathLike | None = None,
    pin_config_sha256: str | None = None,
    verify_sha256: bool = True,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    source_checkpoint: dict | None = None,
) -> PreparedCheckpoint:
    """Return a valid cache entry for `source_path`, building it with `prepare(source_ckpt) ->
    (artifact dict, record JSON)` only when no valid one exists. `source_checkpoint`: the
    already loaded source (saves a second read)."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", compat_version):
        raise CheckpointError(f"compat_version {compat_version!r} must be a file-name-safe token")
    source = Path(source_path).expanduser().resolve()
    ckpt = source_checkpoint if source_checkpoint is not None else load_checkpoint(source)
    fingerprint = source_fingerprint(source, ckpt, compat_version, pin_config_sha256)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    artifact = cache / f"{entry_stem(source)}.rollout-{compat_version}-{fingerprint[:16]}.ckpt"
    marker_path = artifact.with_name(artifact.name + ".json")

    marker, reason = check_entry(artifact, marker_path, fingerprint, compat_version, verify_sha256=verify_sha256)
    if marker is not None:
        return PreparedCheckpoint(artifact, marker_path, fingerprint, True, None, marker)

    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(artifact.with_name(artifact.name + ".lock")), timeout=lock_timeout_s)
        lock.acquire()
    except Timeout:
        raise CheckpointError(f"another process held the lock on {artifact} for over {lock_timeout_s} s") from None
    except OSError as exc:
        raise CheckpointError(
            f"cannot use checkpoint cache {str(cache)!r} ({exc.strerror or exc}); set ${CACHE_DIR_ENV} or cache_dir "
            "to a writable directory"
        ) from exc
    try:
        marker, reason_now = check_entry(
            artifact, marker_path, fingerprint, compat_version, verify_sha256=verify_sha256
        )
        if marker is not None:  # another process built it while we waited
            return PreparedCheckpoint(artifact, marker_path, fingerprint, True, None, marker)
        reason = reason_now or reason
        if reason:
            log.warning("checkpoint cache entry %s is rebuilt: %s", artifact.name, reason)
        started = time.monotonic()
        artifact_obj, record = prepare(ckpt)
        marker_path.unlink(missing_ok=True)  # a crash below must not leave an old marker vouching for a new file
        try:
            atomic_torch_save(artifact_obj, artifact)
        except (OSError, RuntimeError) as exc:  # torch reports a full disk as RuntimeError ("enforce fail")
            raise CheckpointError(_write_failure(cache, exc)) from exc
        st = source.stat()
        marker = {
            "marker_version": MARKER_VERSION,
            "cache_version": CACHE_VERSION,
            "compat_version": compat_version,
            "fingerprint": fingerprint,
            "artifact": artifact.name,
            "artifact_size": artifact.stat().st_size,
            "artifact_sha256": _file_sha256(artifact),
            "source": {"path": str(source), "size": st.st_size, "mtime_ns": st.st_mtime_ns},
            "epoch": _as_json_scalar(ckpt.get("epoch")),
            "global_step": _as_json_scalar(ckpt.get("global_step")),
            "pin_config_sha256": pin_config_sha256,
            "migration": dict(record),
            "prepare_s": round(time.monotonic() - started, 3),
        }
        _write_json_atomic(marker_path, marker)
        _fsync_dir(cache)
        return PreparedCheckpoint(artifact, marker_path, fingerprint, False, reason, marker)
    finally:
        lock.release()
