"""The matrix's expectations, as pytest tests: added by ``pytest --sde-cpu=...``.

One test per (cell, check).  A cell runs once; its checks read one result.
"""

from __future__ import annotations

from typing import Any

import pytest

from sdematrix.integrations.pytest_plugin import classify, record

# pytest still writes per-test <properties> under the default xunit2 family
# (checked); it only warns that the xunit2 schema does not define them.
pytestmark = pytest.mark.filterwarnings("ignore:record_property is incompatible")


def test_cell(sde_session: Any, sde_cell: Any, sde_check: str, record_property: Any) -> None:
    rec = sde_session.run_cell(sde_cell)
    record(record_property, rec)
    record_property("check", sde_check)
    out = rec.outcome
    if out.status == "skip":
        pytest.skip(out.message)
    if out.status == "error":
        pytest.fail(f"{sde_cell.name}: run error: {out.message}\n{out.output_tail}", pytrace=False)
    mine = [r for r in out.reasons if classify(r) == sde_check] if out.status == "fail" else []
    if mine:
        pytest.fail(f"{sde_cell.name} [{sde_check}]:\n  " + "\n  ".join(mine), pytrace=False)
