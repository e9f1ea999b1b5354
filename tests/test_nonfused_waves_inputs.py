"""experiments.studies.nonfused_waves (measure, after): a bad shape or bad parameters are one line, before any GPU work."""

from __future__ import annotations

import pytest

from experiments.studies.nonfused_waves.measure import check_inputs


@pytest.mark.parametrize("shapes, params, says", [(["N=0,C=3"], "", "lacks K, H, W"),
                                                  (["resnet-1"], "pairs=-3", "pairs=-3 is not allowed")])
def test_bad_input_is_one_line(shapes, params, says):
    with pytest.raises(SystemExit, match=f"nonfused_waves.after: .*{says}"):
        check_inputs("nonfused_waves.after", shapes, params)


def test_good_input_passes():
    check_inputs("nonfused_waves.measure", ["resnet-1", "N=32,C=8,K=64,H=96,W=96"], "")
