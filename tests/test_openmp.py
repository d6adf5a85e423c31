"""The package sets GNU OpenMP's spin count before torch loads (cosyvoice_ui/openmp.py: spinning threads made a
decode 13x slower when another process held a core), and an explicit setting in the environment wins."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cosyvoice_ui.openmp import SPIN_COUNT

PROBE = "import os, cosyvoice_ui, torch; print(os.environ.get('GOMP_SPINCOUNT'), torch.get_num_threads() > 0)"


@pytest.mark.parametrize("given, expected", [({}, SPIN_COUNT), ({"GOMP_SPINCOUNT": "7"}, "7"),
                                             ({"OMP_WAIT_POLICY": "ACTIVE"}, "None")])
def test_the_spin_count_is_set_before_torch_unless_the_environment_decides(given: dict, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**env, **given}, capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == [expected, "True"]
