"""Every row of the defense table (``tests/defense_off.py``) still finds the code it switches off:
a row whose snippet drifted away from a refactored defense would report nothing, and the
defense would go untested without anyone seeing it (two rows had, after the build store's
manifest check moved into one function)."""

from __future__ import annotations

import pytest

from tests.defense_off import DEFENSES, stale


@pytest.mark.parametrize("defense", DEFENSES, ids=[d.name for d in DEFENSES])
def test_each_row_finds_its_defense_once(defense):
    assert stale(defense) == "", f"{defense.name}: {stale(defense)}"
