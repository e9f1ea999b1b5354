"""The training-check conditioning study (experiments.studies.training_check.loss_conditioning) on a tiny
run: its ResNet-50 is torchvision's architecture, the float64 copy is the reference, a perturbed convolution
moves the losses and an unperturbed FP32 copy stays close; bad arguments are refused in one line."""

import pytest

torch = pytest.importorskip("torch")

from experiments.studies.training_check import loss_conditioning as lc  # noqa: E402


def test_resnet50_has_torchvisions_shape_and_parameter_count():
    model = lc.resnet50(torch)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 53
    assert sum(1 for m in convs if m.kernel_size == (3, 3) and m.stride == (1, 1)) == 13
    assert sum(p.numel() for p in model.parameters()) == 25_557_032      # torchvision.models.resnet50()
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 1000)


def test_study_rows_compare_against_float64():
    # one step: the losses of the first forward, where FP32 rounding is small and a wrong convolution is not
    rows, losses = lc.study(torch, image_size=64, batch=4, steps=1, lr=1e-3, scales=(1.0,), conv_errors=(1e-1,))
    assert [r["copy"] for r in rows] == ["fp32", "fp32_err_0.1"]
    fp32, wrong = rows
    assert len(losses["1"]["float64"]) == 1 and len(fp32["rel_loss_diff_per_step"].split()) == 1
    assert fp32["max_rel_loss_diff"] < 1e-5
    assert wrong["max_rel_loss_diff"] > 10 * fp32["max_rel_loss_diff"]


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as info:
        lc.main(["--image-size", "8", "--out", "unused"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--image-size 8 (>= 32)" in err
