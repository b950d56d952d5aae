"""attention_book.modes (floor 0): ``evaluating(model)`` runs a block in evaluation mode and restores every mode."""

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.modes import evaluating


def _model():
    return nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Sequential(nn.Linear(4, 2), nn.Dropout(0.5)))


def test_the_block_runs_in_evaluation_mode_and_training_mode_comes_back():
    model = _model().train()
    with evaluating(model) as inside:
        assert inside is model
        assert not any(module.training for module in model.modules())
        x = torch.randn(3, 4)
        torch.testing.assert_close(model(x), model(x))  # no dropout
    assert all(module.training for module in model.modules())


def test_a_model_in_evaluation_mode_stays_in_it():
    model = _model().eval()
    with evaluating(model):
        pass
    assert not any(module.training for module in model.modules())


def test_a_model_switched_to_training_inside_the_block_comes_back_in_evaluation_mode():
    model = _model().eval()
    with evaluating(model):
        model.train()
    assert not any(module.training for module in model.modules())


def test_the_mode_of_every_submodule_is_restored_exactly():
    model = _model().train()
    model[0].eval()  # a frozen part under a trained head
    model[2][1].eval()
    before = [module.training for module in model.modules()]
    assert len(set(before)) == 2  # a mixture
    with evaluating(model):
        assert not any(module.training for module in model.modules())
    assert [module.training for module in model.modules()] == before


def test_the_modes_are_restored_when_the_block_raises():
    model = _model().train()
    model[1].eval()
    before = [module.training for module in model.modules()]
    with pytest.raises(RuntimeError, match="inside"):
        with evaluating(model):
            raise RuntimeError("inside")
    assert [module.training for module in model.modules()] == before


@pytest.mark.parametrize("value", [None, "model", torch.zeros(2), [nn.Linear(2, 2)]])
def test_anything_but_a_module_is_refused(value):
    with pytest.raises(ValueError, match="needs a torch.nn.Module"):
        with evaluating(value):
            pass


def test_it_is_the_same_function_everywhere():
    from attention_book.training import loop

    assert ab.evaluating is evaluating is loop.evaluating
