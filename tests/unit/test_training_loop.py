"""attention_book.training.loop (chapters 2-7): the one ``fit``, its record (History), ``evaluate`` and ``set_seed``."""

import random

import numpy as np
import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.training.loop import History, evaluate, move_batch, set_seed


def _data(steps=10, batch=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [
        {"x": torch.randn(batch, 3, generator=generator), "y": torch.randn(batch, 1, generator=generator)}
        for _ in range(steps)
    ]


def _mse(model, batch):
    return ((model(batch["x"]) - batch["y"]) ** 2).mean()


def _tiny_fit(**options):
    torch.manual_seed(0)
    return ab.fit(nn.Linear(3, 1), _data(), _mse, progress=False, **options)


# ---------------------------------------------------------------------------------
# The learning-rate schedule


def test_linear_schedule_warms_up_then_decays_to_zero():
    history = _tiny_fit(epochs=2, lr=0.1, schedule="linear", warmup_fraction=0.1)  # 20 steps, 2 of warm-up
    rates = history.learning_rate
    assert len(rates) == 20
    assert rates[:3] == pytest.approx([0.05, 0.1, 0.1 * 18 / 18])
    assert rates == sorted(rates[:2]) + sorted(rates[2:], reverse=True)
    assert rates[-1] == pytest.approx(0.1 / 18)


def test_without_a_schedule_the_rate_is_constant_and_max_steps_bounds_the_schedule():
    assert _tiny_fit(lr=0.01).learning_rate == [0.01] * 10
    rates = _tiny_fit(epochs=5, lr=0.1, schedule="linear", warmup_fraction=0.0, max_steps=4).learning_rate
    assert rates == pytest.approx([0.1, 0.075, 0.05, 0.025])


@pytest.mark.parametrize(
    "options, pattern", [(dict(schedule="cosine"), "schedule"), (dict(warmup_fraction=1.0), "warmup_fraction")]
)
def test_fit_rejects_a_bad_schedule(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        _tiny_fit(**options)


def test_a_schedule_needs_to_know_how_many_steps_there_are():
    def endless():
        while True:
            yield {"x": torch.randn(4, 3), "y": torch.randn(4, 1)}

    with pytest.raises(ValueError, match="number of steps"):
        ab.fit(nn.Linear(3, 1), endless(), lambda m, b: m(b["x"]).sum(), schedule="linear", progress=False)


# ---------------------------------------------------------------------------------
# A given optimizer: one learning rate per parameter group


class _TwoParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = nn.Linear(3, 3), nn.Linear(3, 1)

    def forward(self, x):
        return self.head(self.body(x))


def _grouped(body_lr=1e-4, head_lr=1e-2):
    torch.manual_seed(0)
    model = _TwoParts()
    optimizer = torch.optim.SGD(
        [{"params": model.body.parameters(), "lr": body_lr}, {"params": model.head.parameters(), "lr": head_lr}]
    )
    return model, optimizer


def test_a_given_optimizer_keeps_the_rate_of_each_parameter_group():
    model, optimizer = _grouped()
    seen = []
    history = ab.fit(
        model,
        _data(),
        _mse,
        optimizer=optimizer,
        progress=False,
        on_step=lambda step, batch, loss: seen.append([group["lr"] for group in optimizer.param_groups]),
    )
    assert seen == [[1e-4, 1e-2]] * 10
    assert history.learning_rate == [1e-4] * 10  # the first group's rate


def test_a_given_optimizers_rates_are_what_its_steps_use():
    """One SGD step moves each group by its own rate times its gradient."""
    model, optimizer = _grouped(body_lr=0.1, head_lr=0.5)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = _data(steps=1)
    gradients = torch.autograd.grad(_mse(model, batch[0]), list(model.parameters()))
    ab.fit(model, batch, _mse, optimizer=optimizer, clip_norm=None, progress=False)
    for (name, parameter), gradient in zip(model.named_parameters(), gradients):
        rate = 0.1 if name.startswith("body") else 0.5
        torch.testing.assert_close(parameter.detach(), before[name] - rate * gradient)


def test_a_linear_schedule_scales_every_group_by_the_same_factor():
    model, optimizer = _grouped(body_lr=1e-4, head_lr=1e-2)
    seen = []
    history = ab.fit(
        model,
        _data(),
        _mse,
        epochs=2,
        optimizer=optimizer,
        schedule="linear",
        warmup_fraction=0.1,
        progress=False,
        on_step=lambda step, batch, loss: seen.append([g["lr"] for g in optimizer.param_groups]),
    )
    factors = [0.5, 1.0] + [(20 - step) / 18 for step in range(2, 20)]  # 20 planned steps, 2 of warm-up
    assert [body for body, _ in seen] == pytest.approx([1e-4 * f for f in factors])
    assert [head for _, head in seen] == pytest.approx([1e-2 * f for f in factors])
    assert history.learning_rate == pytest.approx([1e-4 * f for f in factors])


@pytest.mark.parametrize("options", [dict(lr=0.01), dict(weight_decay=0.1)])
def test_giving_both_an_optimizer_and_fits_own_settings_is_an_error(options):
    model, optimizer = _grouped()
    with pytest.raises(ValueError, match="either an optimizer or lr/weight_decay"):
        ab.fit(model, _data(), _mse, optimizer=optimizer, progress=False, **options)


# ---------------------------------------------------------------------------------
# The on_step hook and what History counts


def test_on_step_is_called_once_per_step_with_increasing_step_numbers_and_the_loss():
    calls = []
    history = _tiny_fit(
        epochs=3, max_steps=25, on_step=lambda step, batch, loss: calls.append((step, set(batch), loss))
    )
    assert history.steps == 25
    assert [step for step, _, _ in calls] == list(range(1, 26))
    assert all(keys == {"x", "y"} for _, keys, _ in calls)
    assert [loss for _, _, loss in calls] == history.step_loss


def test_history_counts_examples_and_the_real_tokens_of_padded_batches():
    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, 2)

        def forward(self, tokens, padding_mask):
            return ab.mean_pool(self.embedding(tokens), padding_mask)

    lengths = [[3, 1, 4], [2, 2, 5], [1, 1]]
    batches = []
    for row_lengths in lengths:
        padding_mask = torch.arange(5)[None, :] < torch.tensor(row_lengths)[:, None]
        batches.append(
            {
                "tokens": torch.where(padding_mask, 3, 0),
                "padding_mask": padding_mask,
                "label": torch.zeros(len(row_lengths), dtype=torch.long),
            }
        )
    history = ab.fit(Classifier(), batches, ab.classification_loss, epochs=2, progress=False)
    assert history.steps == 6
    assert history.examples_seen == 2 * (3 + 3 + 2)
    assert history.tokens_seen == 2 * sum(map(sum, lengths))
    no_padding = _tiny_fit(epochs=2)
    assert no_padding.examples_seen == 2 * 10 * 4 and no_padding.tokens_seen == 0


def test_history_records_loss_validation_and_time_and_fit_leaves_the_model_in_evaluation_mode():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 1), nn.Dropout(0.1))
    data = _data()
    metric = lambda model, batch: (int((model(batch["x"]) > 0).sum()), len(batch["x"]))
    history = ab.fit(model, data, _mse, epochs=3, valid_loader=data[:2], metric_fn=metric, progress=False)
    assert isinstance(history, History) and history.steps == 30 and len(history.step_loss) == 30
    assert history.epoch == [1, 2, 3] and len(history.valid_metric) == 3 and history.seconds > 0
    assert not model.training
    ax = history.plot(metric="validation accuracy")
    assert ax.get_xlabel() == "step" and len(ax.figure.axes) == 2  # loss and, on the right, the metric
    legend = ax.figure.axes[1].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["training loss", "validation accuracy"]


def test_a_validation_target_stops_training_early():
    metric = lambda model, batch: (1, 1)
    history = _tiny_fit(epochs=5, valid_loader=_data(1), metric_fn=metric, target=0.9)
    assert history.epoch == [1] and history.steps == 10


@pytest.mark.parametrize(
    "options, pattern",
    [
        (dict(epochs=0), "epochs"),
        (dict(max_steps=0), "max_steps"),
        (dict(target=0.5), "valid_loader and metric_fn"),
        (dict(valid_loader=[{}]), "valid_loader and metric_fn"),
    ],
)
def test_fit_rejects_bad_arguments(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        _tiny_fit(**options)


# ---------------------------------------------------------------------------------
# evaluate, move_batch and set_seed


def test_evaluate_adds_up_correct_and_total_over_the_loader_in_evaluation_mode():
    model = nn.Sequential(nn.Linear(1, 1), nn.Dropout(0.5)).train()
    modes = []

    def metric(model, batch):
        modes.append(model.training)
        return int(batch["right"]), int(batch["count"])

    loader = [
        {"right": torch.tensor(3), "count": torch.tensor(4)},
        {"right": torch.tensor(1), "count": torch.tensor(6)},
    ]
    assert evaluate(model, loader, metric) == pytest.approx(0.4)
    assert modes == [False, False] and model.training  # evaluated in eval mode, then restored
    with pytest.raises(ValueError, match="no examples"):
        evaluate(model, [], metric)


def test_move_batch_moves_every_tensor():
    batch = move_batch({"a": torch.zeros(2), "b": torch.ones(1, dtype=torch.long)}, "cpu")
    assert set(batch) == {"a", "b"} and all(value.device.type == "cpu" for value in batch.values())


def test_set_seed_repeats_python_numpy_and_torch():
    set_seed(7)
    first = (random.random(), np.random.rand(), torch.rand(2))
    set_seed(7)
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])


def test_history_keeps_each_steps_gradient_norm_before_clipping_and_clipping_caps_the_step():
    """fit clips the norm of all gradients together to clip_norm, and records the norm it found."""
    data = [
        {"x": 100 * torch.randn(4, 3, generator=torch.Generator().manual_seed(s)), "y": torch.zeros(4, 1)}
        for s in range(3)
    ]
    found = []
    for clip_norm in (1.0, None):
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        start = torch.cat([p.detach().flatten() for p in model.parameters()])
        history = ab.fit(
            model,
            data[:1],
            _mse,
            clip_norm=clip_norm,
            progress=False,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
        )
        moved = torch.cat([p.detach().flatten() for p in model.parameters()]) - start
        found.append((history.gradient_norm, moved.norm().item()))
    (clipped_norms, clipped_move), (free_norms, free_move) = found
    assert len(clipped_norms) == 1 and clipped_norms == pytest.approx(free_norms)  # the norm before clipping
    assert clipped_norms[0] > 10  # large inputs, large gradient
    assert clipped_move == pytest.approx(0.1 * 1.0, rel=1e-4)  # SGD step of lr * clipped norm
    assert free_move == pytest.approx(0.1 * free_norms[0], rel=1e-4)


def test_an_early_stopped_notebook_bar_is_drawn_full_and_green():
    """The widget the notebook saves (and the website draws) must say value == max, not 21 of 63."""
    from tqdm.notebook import tqdm as notebook_tqdm

    from attention_book.training.loop import _finish

    bar = notebook_tqdm(total=63, desc="training")
    bar.update(21)
    _finish(bar, "target reached")
    progress = [child for child in bar.container.children if hasattr(child, "bar_style")]
    assert len(progress) == 1
    assert progress[0].value == progress[0].max == 21 and progress[0].bar_style == "success"
    assert "(target reached)" in bar.desc


def test_the_history_plot_puts_its_legend_where_asked():
    """``legend_loc`` (chapter 2 moves the legend off the curve) works on matplotlib 3.7, the floor: no
    Legend.set_loc (3.8) is needed."""
    history = History(step_loss=[3.0, 1.0, 0.1], valid_metric=[0.9], steps=3, epoch=[1])
    for where, code in (("center right", 7), ("lower left", 3)):
        ax = history.plot(legend_loc=where) if where != "center right" else history.plot()
        assert ax.figure.axes[-1].get_legend()._loc == code
