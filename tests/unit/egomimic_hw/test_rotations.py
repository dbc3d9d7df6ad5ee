"""Quaternion distances and steps in rotations.py, against scipy with the convention spelled out
(`scalar_first=True`: our quaternions are wxyz), plus the shared entry check."""

import numpy as np
import pytest
from scipy.spatial.transform import Rotation, Slerp

from egomimic_hw.errors import PoseError
from egomimic_hw.rotations import as_array_of_shape, quat_angle, quat_nlerp, quat_rotate_toward


def random_unit_quats(n, seed=0):
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def scipy_rotate_toward(quat_from, quat_to, max_angle_rad):
    """The same step with scipy's Rotation: the reference quat_rotate_toward must equal bit for bit."""
    r_from = Rotation.from_quat(quat_from, scalar_first=True)
    rotvec = (r_from.inv() * Rotation.from_quat(quat_to, scalar_first=True)).as_rotvec()
    angle = float(np.linalg.norm(rotvec))
    if angle > max_angle_rad:
        rotvec *= max_angle_rad / angle
    out = (r_from * Rotation.from_rotvec(rotvec)).as_quat(scalar_first=True)
    return out / np.linalg.norm(out)


def rotate_toward_cases():
    """Random pairs at every distance scale, plus the branch edges: the same rotation, its
    negation, half turns (qw = 0, where the sign goes by x, y, z), angles under the 1e-3 rad
    Taylor threshold, quaternions off unit norm, and limits of 0 and beyond pi."""
    rng = np.random.default_rng(7)
    cases = []
    for i, qa in enumerate(random_unit_quats(1500, seed=3)):
        scale = 10.0 ** rng.uniform(-9, 0.5)
        qb = qa + rng.normal(size=4) * scale
        qb = (-qb if i % 2 else qb) * (1.0 + rng.uniform(-1e-3, 1e-3))
        cases.append((qa, qb, float(rng.choice([0.0, 1e-4, 5e-4, 0.06, 0.5, 4.0]))))
    half_turn = np.array([0.0, 0.0, 1.0, 0.0])
    for qa, qb in [
        ([1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]),
        ([1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0]),
        ([1.0, 0.0, 0.0, 0.0], half_turn),
        ([1.0, 0.0, 0.0, 0.0], -half_turn),
        ([0.0, -1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 0.0]),
        ([0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, -0.5]),
        ([2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]),
    ]:
        for limit in (0.0, 1e-4, 0.06, np.pi, 10.0):
            cases.append((np.array(qa), np.array(qb), limit))
    return cases


def test_rotate_toward_is_bit_identical_to_scipy():
    cases = rotate_toward_cases()
    mismatches = [
        (qa, qb, lim)
        for qa, qb, lim in cases
        if not np.array_equal(quat_rotate_toward(qa, qb, lim), scipy_rotate_toward(qa, qb, lim))
    ]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ from scipy, first: {mismatches[0]}"


def test_rotate_toward_moves_at_most_the_limit_and_stops_at_the_target():
    a, b = random_unit_quats(2, seed=11)
    full = quat_angle(a, b)
    step = quat_rotate_toward(a, b, 0.25 * full)
    assert quat_angle(a, step) == pytest.approx(0.25 * full, abs=1e-12)
    assert quat_angle(step, b) == pytest.approx(0.75 * full, abs=1e-12)  # on the geodesic
    reached = quat_rotate_toward(a, b, 2.0 * full)
    assert quat_angle(reached, b) < 1e-7 and np.linalg.norm(reached) == pytest.approx(1.0)
    assert quat_angle(quat_rotate_toward(a, -b, 0.25 * full), step) < 1e-7  # -b is b: same short path


@pytest.mark.parametrize(
    "bad",
    [[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [np.nan, 0.0, 0.0, 1.0], [[1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]],
)
def test_rotate_toward_refuses_what_is_not_one_rotation(bad):
    with pytest.raises(PoseError):
        quat_rotate_toward(bad, [1.0, 0.0, 0.0, 0.0], 0.1)
    with pytest.raises(PoseError):
        quat_rotate_toward([1.0, 0.0, 0.0, 0.0], bad, 0.1)


def test_quat_angle_is_scipys_relative_magnitude_and_sign_free():
    qa, qb = random_unit_quats(500, seed=5), random_unit_quats(500, seed=6)
    ref = (Rotation.from_quat(qa, scalar_first=True).inv() * Rotation.from_quat(qb, scalar_first=True)).magnitude()
    ours = np.array([quat_angle(a, b) for a, b in zip(qa, qb)])
    np.testing.assert_allclose(ours, ref, atol=1e-7)  # arccos near 1 loses precision: 1e-7, not 1e-12
    assert all(quat_angle(a, -b) == quat_angle(a, b) for a, b in zip(qa[:20], qb[:20]))
    assert quat_angle([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]) == pytest.approx(np.pi)


def test_quat_angle_of_non_finite_input_is_the_largest_angle():
    q = np.array([1.0, 0.0, 0.0, 0.0])
    assert quat_angle(q, [np.nan, 0.0, 0.0, 0.0]) == pytest.approx(np.pi)
    assert quat_angle([np.inf, 0.0, 0.0, 0.0], q) == pytest.approx(np.pi)


def test_nlerp_endpoints_norm_and_sign():
    qa, qb = random_unit_quats(200, seed=8), random_unit_quats(200, seed=9)
    np.testing.assert_allclose(quat_nlerp(qa, qb, np.ones(200)), qa, atol=1e-15)
    end = quat_nlerp(qa, qb, np.zeros(200))
    aligned = np.where(np.sum(qa * qb, axis=1, keepdims=True) < 0.0, -qb, qb)
    np.testing.assert_allclose(end, aligned, atol=1e-15)  # b, on a's side of the double cover
    mid = quat_nlerp(qa, qb, np.full(200, 0.5))
    np.testing.assert_allclose(np.linalg.norm(mid, axis=1), 1.0, atol=1e-12)
    np.testing.assert_array_equal(quat_nlerp(qa, -qb, np.full(200, 0.3)), quat_nlerp(qa, qb, np.full(200, 0.3)))


def test_nlerp_is_slerp_between_neighbouring_control_rows():
    """Rows 33 ms apart at the declared 1.8 rad/s are 0.06 rad apart: nlerp stays within 1e-5 rad of slerp."""
    qa = random_unit_quats(50, seed=12)
    steps = Rotation.from_rotvec(np.random.default_rng(13).normal(size=(50, 3)) * 0.06 / np.sqrt(3))
    qb = (Rotation.from_quat(qa, scalar_first=True) * steps).as_quat(scalar_first=True)
    for a, b in zip(qa, qb):
        slerp = Slerp([0.0, 1.0], Rotation.from_quat([a, b], scalar_first=True))
        for weight_a in (0.25, 0.5, 0.75):
            ref = slerp([1.0 - weight_a]).as_quat(scalar_first=True)[0]
            assert quat_angle(quat_nlerp(a, b, weight_a), ref) < 1e-5


def test_as_array_of_shape_checks_trailing_shape_and_finiteness():
    assert as_array_of_shape(np.zeros((2, 5, 7)), (7,), "pose").shape == (2, 5, 7)
    assert as_array_of_shape([[1, 0, 0], [0, 1, 0], [0, 0, 1]], (3, 3), "matrix").dtype == float
    with pytest.raises(PoseError, match=r"pose: expected shape \(\.\.\., 7\), got \(6,\)"):
        as_array_of_shape(np.zeros(6), (7,), "pose")
    with pytest.raises(PoseError, match="matrix: expected shape"):
        as_array_of_shape(np.zeros(3), (3, 3), "matrix")
    with pytest.raises(PoseError, match="joints: non-finite"):
        as_array_of_shape([0.0, np.inf], (2,), "joints")
