"""The gate's reason codes agree with the interface contract (docs/interfaces.md): every code
listed there exists, and every code added beyond it says what it means."""

import ast
import re
from pathlib import Path

from egomimic_safety.reasons import Reason

REPO = Path(__file__).resolve().parents[3]


def contract_codes() -> set[str]:
    text = (REPO / "docs/interfaces.md").read_text()
    section = text.split("## Reason codes", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`([A-Z_]+)`", section))


def documented_members() -> set[str]:
    """Members of Reason followed by a docstring in reasons.py."""
    tree = ast.parse((REPO / "egomimic_safety/reasons.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Reason")
    out = set()
    for stmt, nxt in zip(cls.body, cls.body[1:], strict=False):
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out.add(stmt.targets[0].id)
    return out


def test_every_contract_code_is_a_reason_with_its_own_name_as_value():
    codes = contract_codes()
    assert len(codes) >= 16, codes  # the list was found
    assert codes <= {r.value for r in Reason}, codes - {r.value for r in Reason}
    assert all(r.name == r.value for r in Reason), "a code's name is its wire value"


def test_codes_beyond_the_contract_say_what_they_mean():
    added = {r.name for r in Reason} - contract_codes()
    assert added, "the gate has codes of its own (BAD_QUATERNION, ...)"
    assert added <= documented_members(), added - documented_members()
