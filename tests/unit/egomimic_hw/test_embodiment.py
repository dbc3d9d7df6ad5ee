"""Embodiment registry: ids never change, aliases resolve, legacy migration is checked."""

import pytest

from egomimic_hw.embodiment import (
    ALIASES,
    LEGACY_MIGRATION,
    Embodiment,
    LegacyEmbodiment,
    embodiment_by_id,
    embodiment_by_name,
    migrate_legacy_id,
)
from egomimic_hw.errors import ConfigError

# The ids of docs/eva.md, written out independently of the enum: a renumbering fails here.
CURRENT = {
    "human_right_arm": 1,
    "human_left_arm": 2,
    "human_bimanual": 3,
    "eva_right_arm": 4,
    "eva_left_arm": 5,
    "eva_bimanual": 6,
    "pushshapes_sim": 15,
    "pushshapes_stick": 16,
    "pushshapes_small_circle": 17,
}

UPSTREAM_LEGACY = {
    "EVE_RIGHT_ARM": 0,
    "EVE_LEFT_ARM": 1,
    "EVE_BIMANUAL": 2,
    "ARIA_RIGHT_ARM": 3,
    "ARIA_LEFT_ARM": 4,
    "ARIA_BIMANUAL": 5,
    "EVA_RIGHT_ARM": 6,
    "EVA_LEFT_ARM": 7,
    "EVA_BIMANUAL": 8,
    "MECKA_BIMANUAL": 9,
    "MECKA_RIGHT_ARM": 10,
    "MECKA_LEFT_ARM": 11,
    "SCALE_BIMANUAL": 12,
    "SCALE_RIGHT_ARM": 13,
    "SCALE_LEFT_ARM": 14,
    "EGO_VIEW_BIMANUAL": 18,
}
"""Upstream's pre-collapse EMBODIMENT enum as EgoVerse defines it (names and numbers)."""


def test_current_ids_are_fixed():
    assert {e.key: int(e) for e in Embodiment} == CURRENT


def test_legacy_ids_are_upstreams():
    assert {e.name: int(e) for e in LegacyEmbodiment} == UPSTREAM_LEGACY


@pytest.mark.parametrize("name", ["eva_bimanual", "EVA_BIMANUAL", " Eva_Bimanual "])
def test_lookup_by_name_is_case_insensitive(name):
    assert embodiment_by_name(name) is Embodiment.EVA_BIMANUAL


def test_vendor_aliases_map_to_human():
    for vendor in ("aria", "mecka", "scale"):
        assert embodiment_by_name(f"{vendor.upper()}_BIMANUAL") is Embodiment.HUMAN_BIMANUAL
        assert embodiment_by_name(f"{vendor}_left_arm") is Embodiment.HUMAN_LEFT_ARM
    assert all(alias == alias.lower() for alias in ALIASES)


def test_alias_table_is_read_only():
    with pytest.raises(TypeError):
        ALIASES["new"] = Embodiment.EVA_BIMANUAL  # type: ignore[index]


@pytest.mark.parametrize("bad", ["", "eva", "robot_9", None])
def test_unknown_name_is_refused(bad):
    with pytest.raises(ConfigError):
        embodiment_by_name(bad)


def test_lookup_by_id_refuses_legacy_and_unknown_ids():
    assert embodiment_by_id(6) is Embodiment.EVA_BIMANUAL
    for bad in (0, 8, 18, 99, "x"):
        with pytest.raises(ConfigError):
            embodiment_by_id(bad)


def test_legacy_migration():
    assert migrate_legacy_id(8) is Embodiment.EVA_BIMANUAL
    assert migrate_legacy_id(18) is Embodiment.HUMAN_BIMANUAL
    assert dict(LEGACY_MIGRATION) == {8: Embodiment.EVA_BIMANUAL, 18: Embodiment.HUMAN_BIMANUAL}
    with pytest.raises(ConfigError, match="no migration"):
        migrate_legacy_id(3)


def test_migration_table_is_checked_against_the_enums(monkeypatch):
    import egomimic_hw.embodiment as reg

    monkeypatch.setitem(reg._LEGACY_MIGRATION_BY_NAME, "EVA_BIMANUAL", ("EVA_BIMANUAL", 8, 5))
    with pytest.raises(ConfigError, match="disagrees"):
        reg._build_migration()
