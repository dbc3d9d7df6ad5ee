"""Embodiment ids: baked into every dataset and checkpoint, so they are never renumbered.

Three tables, each with one job:
- `Embodiment`: the current ids (docs/eva.md "Embodiments").
- `LegacyEmbodiment`: the ids older checkpoints carry. Read-only history.
- `ALIASES`: append-only lowercase name -> current embodiment, for old vendor names in files.
`LEGACY_MIGRATION` maps the legacy ids that checkpoint migration rewrites to current members;
it is checked against both enums at import, so a wrong literal fails loudly at start-up, not in
a rollout.
"""

from __future__ import annotations

from enum import IntEnum
from types import MappingProxyType

from egomimic_hw.errors import ConfigError


class Embodiment(IntEnum):
    HUMAN_RIGHT_ARM = 1
    HUMAN_LEFT_ARM = 2
    HUMAN_BIMANUAL = 3
    EVA_RIGHT_ARM = 4
    EVA_LEFT_ARM = 5
    EVA_BIMANUAL = 6
    PUSHSHAPES_SIM = 15
    PUSHSHAPES_STICK = 16
    PUSHSHAPES_SMALL_CIRCLE = 17
    """15-17: upstream's PushShapes simulation embodiments (16 and 17 from EgoVerse PR #552)."""

    @property
    def key(self) -> str:
        """The lowercase name used in files (`eva_bimanual`)."""
        return self.name.lower()


class LegacyEmbodiment(IntEnum):
    """Upstream's pre-collapse `EMBODIMENT` (EgoVerse `egomimic/rldb/embodiment/embodiment.py`):
    note MECKA_* and SCALE_* list BIMANUAL first, unlike EVE/ARIA/EVA."""

    EVE_RIGHT_ARM = 0
    EVE_LEFT_ARM = 1
    EVE_BIMANUAL = 2
    ARIA_RIGHT_ARM = 3
    ARIA_LEFT_ARM = 4
    ARIA_BIMANUAL = 5
    EVA_RIGHT_ARM = 6
    EVA_LEFT_ARM = 7
    EVA_BIMANUAL = 8
    MECKA_BIMANUAL = 9
    MECKA_RIGHT_ARM = 10
    MECKA_LEFT_ARM = 11
    SCALE_BIMANUAL = 12
    SCALE_RIGHT_ARM = 13
    SCALE_LEFT_ARM = 14
    EGO_VIEW_BIMANUAL = 18


# Append-only: add rows at the end, never edit or delete one (files in the wild use them).
ALIASES: MappingProxyType[str, Embodiment] = MappingProxyType(
    {
        "aria_right_arm": Embodiment.HUMAN_RIGHT_ARM,
        "aria_left_arm": Embodiment.HUMAN_LEFT_ARM,
        "aria_bimanual": Embodiment.HUMAN_BIMANUAL,
        "mecka_right_arm": Embodiment.HUMAN_RIGHT_ARM,
        "mecka_left_arm": Embodiment.HUMAN_LEFT_ARM,
        "mecka_bimanual": Embodiment.HUMAN_BIMANUAL,
        "scale_right_arm": Embodiment.HUMAN_RIGHT_ARM,
        "scale_left_arm": Embodiment.HUMAN_LEFT_ARM,
        "scale_bimanual": Embodiment.HUMAN_BIMANUAL,
    }
)

# Legacy id -> current id, by NAME on both sides so the check below can catch a wrong literal.
_LEGACY_MIGRATION_BY_NAME = {
    "EVA_BIMANUAL": ("EVA_BIMANUAL", 8, 6),
    "EGO_VIEW_BIMANUAL": ("HUMAN_BIMANUAL", 18, 3),
}


def _build_migration() -> MappingProxyType[int, Embodiment]:
    table: dict[int, Embodiment] = {}
    for legacy_name, (current_name, legacy_id, current_id) in _LEGACY_MIGRATION_BY_NAME.items():
        legacy = LegacyEmbodiment[legacy_name]
        current = Embodiment[current_name]
        if int(legacy) != legacy_id or int(current) != current_id:
            raise ConfigError(
                f"embodiment migration table disagrees with the enums: {legacy_name}={int(legacy)} "
                f"(table says {legacy_id}) -> {current_name}={int(current)} (table says {current_id})"
            )
        table[int(legacy)] = current
    return MappingProxyType(table)


LEGACY_MIGRATION: MappingProxyType[int, Embodiment] = _build_migration()


def _check_aliases() -> None:
    for alias in ALIASES:
        if alias != alias.lower() or alias in {e.key for e in Embodiment}:
            raise ConfigError(f"alias {alias!r} must be lowercase and must not shadow a current name")


_check_aliases()


def embodiment_by_name(name: str) -> Embodiment:
    """Case-insensitive lookup of a current name or an alias ('EVA_BIMANUAL', 'aria_bimanual')."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"embodiment name must be a non-empty string, got {name!r}")
    key = name.strip().lower()
    for member in Embodiment:
        if member.key == key:
            return member
    if key in ALIASES:
        return ALIASES[key]
    known = sorted([e.key for e in Embodiment] + list(ALIASES))
    raise ConfigError(f"unknown embodiment {name!r}; known names: {', '.join(known)}")


def embodiment_by_id(embodiment_id: int) -> Embodiment:
    """Lookup of a CURRENT id. Legacy ids are not accepted here: use migrate_legacy_id."""
    try:
        return Embodiment(int(embodiment_id))
    except (ValueError, TypeError):
        raise ConfigError(
            f"{embodiment_id!r} is not a current embodiment id "
            f"({', '.join(f'{e.key}={int(e)}' for e in Embodiment)}); legacy checkpoints need migration"
        ) from None


def migrate_legacy_id(legacy_id: int) -> Embodiment:
    """Map a legacy checkpoint id to the current embodiment; refuse ids without a migration."""
    legacy_id = int(legacy_id)
    if legacy_id in LEGACY_MIGRATION:
        return LEGACY_MIGRATION[legacy_id]
    try:
        name = LegacyEmbodiment(legacy_id).name
    except ValueError:
        name = "unknown"
    raise ConfigError(
        f"legacy embodiment id {legacy_id} ({name}) has no migration; migratable: "
        + ", ".join(f"{k} ({LegacyEmbodiment(k).name}) -> {v.key}={int(v)}" for k, v in LEGACY_MIGRATION.items())
    )
