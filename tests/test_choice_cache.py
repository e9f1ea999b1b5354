"""The Winograd choice cache replays a choice only for the spec and model version that made it."""
from __future__ import annotations

import json

from megasim.algorithms.winograd import choice as choice_mod
from megasim.algorithms.winograd.choice import ChoiceCache
from megasim.hardware import get_gpu
from megasim.workloads.problem import ConvProblem

PROBLEM = ConvProblem(1, 8, 8, 9, 9)


def _mark(path, marker: float) -> None:
    entries = json.loads(path.read_text())
    for entry in entries.values():
        entry["predicted_us"] = marker
    path.write_text(json.dumps(entries))


def test_choice_is_replayed_for_the_same_model_and_made_again_for_another(tmp_path, monkeypatch):
    path = tmp_path / "choices.json"
    spec = get_gpu("H100")
    first = ChoiceCache(path).choose(PROBLEM, spec)
    (key,) = json.loads(path.read_text())
    assert f"model-{choice_mod.model_fingerprint()}" in key
    _mark(path, 123.0)                                   # what the file holds is what the same model gets back
    assert ChoiceCache(path).choose(PROBLEM, spec).predicted_us == 123.0
    monkeypatch.setattr(choice_mod, "model_fingerprint", lambda: "0ther000")
    again = ChoiceCache(path).choose(PROBLEM, spec)      # another model version: chosen anew, not replayed
    assert again.predicted_us == first.predicted_us != 123.0
    assert len(json.loads(path.read_text())) == 2


def test_another_spec_is_chosen_anew(tmp_path):
    path = tmp_path / "choices.json"
    ChoiceCache(path).choose(PROBLEM, get_gpu("H100"))
    _mark(path, 123.0)
    assert ChoiceCache(path).choose(PROBLEM, get_gpu("A100")).predicted_us != 123.0
