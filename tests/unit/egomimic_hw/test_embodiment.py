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

# The ids of EVA.md, written out independently of the enum: a renumbering fails here.
CURRENT = {"human_right_arm": 1, "human_left_arm": 2, "human_bimanual": 3, "eva_right_arm": 4,
           "eva_left_arm": 5, "eva_bimanual": 6, "pushshapes_sim": 15}


def test_current_ids_are_fixed():
    assert {e.key: int(e) for e in Embodiment} == CURRENT


def test_legacy_ids_are_fixed():
    assert int(LegacyEmbodiment.EVA_BIMANUAL) == 8 and int(LegacyEmbodiment.EGO_VIEW_BIMANUAL) == 18
    assert [int(e) for e in LegacyEmbodiment] == list(range(15)) + [18]


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
