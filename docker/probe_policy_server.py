"""Does a policy server answer the robot's handshake (and, with --infer, one query)?

The policy-server container's health check and `make docker-check`'s request. It connects the
way the robot's policy node does (egomimic_policy.remote.client.RemotePolicy: hello -> meta, the
server's spec checked against the robot's embodiment and 30 Hz control rate, CURVE when keys are
given), so a server the robot would refuse is unhealthy here too. Exit 0 when it answered, 1
when it did not or was refused, 2 on bad arguments.

    python docker/probe_policy_server.py [--address tcp://127.0.0.1:5555] [--infer]
        [--client-key healthcheck.key_secret --server-key server.key]
"""

from __future__ import annotations

import argparse
import sys
import time


def _observation(spec):
    """An observation of the shape the server's policy asks for (its cameras, image size and
    history), with the arms at a plausible pose: what the policy node would send."""
    import numpy as np

    from egomimic_policy.interface import Observation

    height, width = spec.image_size
    left = np.array([0.30, 0.05, 0.25, 1.0, 0.0, 0.0, 0.0])
    right = np.array([0.30, -0.05, 0.25, 0.0, 1.0, 0.0, 0.0])
    period_ns = int(round(1e9 / spec.rate_hz))
    now = time.time_ns()

    def one(stamp_ns: int, history=()) -> Observation:
        images = {cam: np.full((height, width, 3), 128, np.uint8) for cam in spec.cameras}
        return Observation(stamp_ns, images, left, right, 0.5, 0.5, np.zeros(6), np.zeros(6), tuple(history))

    past = [one(now - k * period_ns) for k in range(spec.obs_steps - 1, 0, -1)]
    return one(now, past)


def main(argv: list[str] | None = None) -> int:
    from egomimic_hw.errors import ConfigError
    from egomimic_policy.remote.client import RemoteConfig, RemotePolicy, RemoteRefused

    defaults = RemoteConfig()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=defaults.address, help="server address (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the handshake (default 5)")
    ap.add_argument("--infer", action="store_true", help="also send one observation and check the chunk")
    ap.add_argument("--infer-timeout", type=float, default=30.0, help="deadline of that query, s (default 30)")
    ap.add_argument("--client-key", default="", help="this client's key pair (.key_secret), for a CURVE server")
    ap.add_argument("--server-key", default="", help="the server's public key (.key), for a CURVE server")
    args = ap.parse_args(argv)
    try:
        config = RemoteConfig(
            address=args.address,
            connect_timeout_s=args.timeout,
            timeout_s=args.infer_timeout,
            client_key_file=args.client_key,
            server_key_file=args.server_key,
        )
        remote = RemotePolicy(config)
    except RemoteRefused as exc:
        print(f"probe_policy_server: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"probe_policy_server: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # RemoteUnavailable
        print(f"probe_policy_server: {exc}", file=sys.stderr)
        return 1
    try:
        spec = remote.spec
        print(f"handshake: {args.address} serves {spec.family} ({spec.fingerprint[:12]}), chunk {spec.chunk_length}")
        if args.infer:
            start = time.perf_counter()
            chunk = remote.infer(_observation(spec))
            rows = len(chunk.left_pose)
            print(f"infer: a chunk of {rows} rows in {(time.perf_counter() - start) * 1e3:.0f} ms")
            if rows < 1:
                return 1
    except (RuntimeError, TimeoutError) as exc:
        print(f"probe_policy_server: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        remote.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
