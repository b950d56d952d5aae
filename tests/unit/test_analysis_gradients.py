"""attention_book.analysis.gradients (chapter 6): how much gradient reaches the bottom of post- and pre-norm stacks."""

import pytest

from attention_book.analysis.gradients import gradient_at_bottom


def test_deep_post_norm_stacks_pass_less_gradient_to_the_bottom_than_pre_norm(one_thread):
    shallow = gradient_at_bottom(1, norm_first=False, seeds=(0,))
    assert gradient_at_bottom(1, norm_first=False, seeds=(0,)) == shallow  # deterministic
    deep_post = gradient_at_bottom(32, norm_first=False, seeds=(0, 1))
    deep_pre = gradient_at_bottom(32, norm_first=True, seeds=(0, 1))
    assert deep_post < 0.6 * shallow and deep_pre > 0.7 * shallow  # the chapter's claim
    with pytest.raises(ValueError, match="depth"):
        gradient_at_bottom(0, norm_first=True)


def test_the_measurement_leaves_the_global_random_state_alone():
    import torch

    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    gradient_at_bottom(2, norm_first=True, seeds=(0,))
    assert torch.equal(torch.rand(3), expected)
