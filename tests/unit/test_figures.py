"""attention_book.figures (chapters 1-7): each chapter's own figures draw what they say, with titles and labelled axes.

Also chapter 4's dependency parse (``figures.chapter04``): a reproducible drawing of the
chapter's sentence, with or without a trained spaCy pipeline.
"""

import re

import pytest
import torch

import attention_book as ab
from attention_book.figures import chapter01, chapter02, chapter03, chapter04, chapter05, chapter06, chapter07
from attention_book.figures.chapter04 import (
    EXAMPLE_SENTENCE,
    HAND_PARSE,
    ParseFigure,
    parse_example,
    relations,
    render_parse,
)
from attention_book.recall import RecallModel


def _labelled(ax) -> bool:
    return bool(ax.get_title() and ax.get_xlabel() and ax.get_ylabel())


# ---------------------------------------------------------------------------------
# Chapter 1


def test_chapter_1_tokens_and_outputs_draws_points_arrows_and_the_hull():
    inputs = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    outputs = torch.tensor([[0.3, 0.3], [0.5, 0.2], [0.2, 0.5]])
    ax = chapter01.plot_tokens_and_outputs(["a", "b", "c"], inputs, outputs, title="weighted sums")
    assert ax.get_title() == "weighted sums" and ax.get_xlabel() == "feature 1"
    assert len(ax.patches) >= 1  # the shaded triangle spanned by the tokens
    assert {text.get_text() for text in ax.texts} >= {"a", "b", "c"}
    with pytest.raises(ValueError, match="2 token labels were given for 3 vectors"):
        chapter01.plot_tokens_and_outputs(["a", "b"], inputs, outputs)
    with pytest.raises(ValueError, match=r"shape \(T, 2\)"):
        chapter01.plot_tokens_and_outputs(["a"], torch.zeros(1, 3), torch.zeros(1, 3))


def test_chapter_1_saturation_and_timings():
    dims = [4, 16, 64]
    band = torch.rand(2, 3)
    figure = chapter01.plot_saturation(dims, band, band, band + 0.1, band + 0.1, num_keys=8)
    assert len(figure.axes) == 2 and all(ax.get_title() and ax.get_xlabel() for ax in figure.axes)
    assert "8" in figure.axes[0].get_title()
    ax = chapter01.plot_timings([64, 128, 256], [1e-4, 4e-4, 1.6e-3], title="cost", device="cpu")
    assert _labelled(ax) and ax.get_xscale() == ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_legend().texts][0] == "measured on cpu"


def test_chapter_1_bottleneck_figure_draws_a_mean_line_and_range_band_per_model_and_chance():
    accuracy = torch.rand(2, 5, 4)
    ax = chapter01.plot_bottleneck([4, 8, 12, 16], accuracy, chance=1 / 8, labels=["vector", "attention"], title="copy")
    assert _labelled(ax) and ax.get_title() == "copy"
    legend = [t.get_text() for t in ax.get_legend().texts]
    assert legend == ["vector", "attention", "chance (1/8)"]
    assert len(ax.collections) == 2  # one range band per model
    torch.testing.assert_close(torch.tensor(ax.lines[0].get_ydata()).float(), accuracy[0].mean(0))
    with pytest.raises(ValueError, match=r"accuracy must be \(models=2, seeds, lengths=4\)"):
        chapter01.plot_bottleneck([4, 8, 12, 16], torch.rand(2, 5, 3), 0.1, ["a", "b"])


def test_chapter_1_influence_draws_median_and_range_on_a_log_axis_and_the_flow_names_every_step():
    runs = {"recurrent layer": [[1e-1, 2e-1], [1e-3, 2e-3]], "attention": [[0.1, 0.05], [0.03, 0.02]]}
    ax = chapter01.plot_influence([5, 10], runs, title="influence")
    assert _labelled(ax) and ax.get_yscale() == "log" and len(ax.collections) == 2
    assert list(ax.lines[0].get_ydata()) == pytest.approx([0.15, 0.0015])
    with pytest.raises(ValueError, match="values for 2 lengths, but 3 lengths"):
        chapter01.plot_influence([5, 10, 20], runs)
    ax = chapter01.plot_attention_flow()
    texts = " ".join(text.get_text() for text in ax.texts)
    for step in ("$Q K^\\top$", "\\sqrt{d_k}", "Mask", "Softmax", "$A V$", "output $H$"):
        assert step in texts, step


def test_chapter_1_layer_costs_are_drawn_per_token_with_the_crossovers_marked():
    lengths = [16, 64, 256]
    costs = {"attention": [T * (3 + T) for T in lengths], "LSTM": [8 * T for T in lengths]}
    ax = chapter01.plot_layer_costs(lengths, costs, {"T = 160": 160}, title="work")
    assert _labelled(ax) and ax.get_xscale() == ax.get_yscale() == "log"
    assert list(ax.lines[1].get_ydata()) == [8.0, 8.0, 8.0]  # per token: flat
    assert any(text.get_text() == "T = 160" for text in ax.texts)


# ---------------------------------------------------------------------------------
# Chapter 2


def test_chapter_2_recall_figures_show_both_maps_and_the_lookups():
    task = ab.AssociativeRecall(3, seed=0)
    torch.manual_seed(0)
    model = RecallModel(len(task.vocab), max_len=10)
    figure = chapter02.plot_recall_attention(model, task.tokens[0], task.vocab, title="one example")
    top, bottom = figure.axes[:2]
    labels = [task.vocab.tokens[i] for i in task.tokens[0].tolist()]
    assert [t.get_text() for t in top.get_xticklabels()] == labels
    assert top.images[0].get_array().shape == (10, 10) and bottom.images[0].get_array().shape == (1, 10)
    assert bottom.get_yticklabels()[0].get_text() == f"{labels[-1]} asks"
    lookups = chapter02.plot_lookups(model, task.tokens, task.vocab)
    assert sum(len(ax.images) for ax in lookups.axes) == 3 and lookups._suptitle.get_text()


def test_chapter_1_draws_two_maps_one_above_the_other_with_one_colour_bar():
    words = ["the", "bank", "of"]
    weights = torch.softmax(torch.randn(3, 3), dim=-1)
    figure = chapter01.plot_attention_pair(
        weights, weights[[2, 0, 1]][:, [2, 0, 1]], words, ["of", "the", "bank"], ("a", "b")
    )
    top, bottom = figure.axes[:2]
    assert [top.get_title(), bottom.get_title()] == ["a", "b"]
    assert top.get_position().y0 > bottom.get_position().y1  # one above the other
    assert [t.get_text() for t in bottom.get_yticklabels()] == ["of", "the", "bank"]
    assert sum(1 for ax in figure.axes if ax.get_ylabel() == "attention weight") == 1
    assert len(top.texts) == len(bottom.texts) == 9  # every weight written in its cell


def test_chapter_1_and_2_figures_are_legible_on_a_phone():
    """Drawn as the chapters' kernels draw them (100 dpi, cropped to what is drawn), each figure's smallest
    text is at least 7 px on a 390 px phone and 8 px on the desktop page (issue 29; tools/site/figure_audit.py)."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    from tests.helpers import tool

    audit = tool("figure_audit")
    task = ab.AssociativeRecall(5, seed=0)
    torch.manual_seed(0)
    model = RecallModel(len(task.vocab), max_len=10)
    runs = torch.rand(5, 4)
    words = ["the", "bank", "of", "the", "river"]
    history = ab.History(step_loss=[0.7] * 63, epoch=[1], valid_metric=[0.99], steps=63)
    figures = {
        "bottleneck": chapter01.plot_bottleneck(
            [4, 8, 12, 16], torch.rand(2, 5, 4), 1 / 8, ["one fixed vector", "attention over the encoder states"]
        ),
        "tokens": chapter01.plot_tokens_and_outputs(
            ["the", "river", "bank"], torch.tensor([[0.0, 0], [1, 0], [1, 1]]), torch.full((3, 2), 0.6)
        ),
        "influence": chapter01.plot_influence(
            [5, 10, 20, 50], {"recurrent layer": runs.T.tolist(), "attention": runs.T.tolist()}
        ),
        "saturation": chapter01.plot_saturation([2, 8, 32, 128], runs, runs, runs, runs, 8),
        "costs": chapter01.plot_layer_costs([8, 64, 512], {"attention": [8, 64, 512]}, {"T = 2.5 d = 160": 160}),
        "pair": chapter01.plot_attention_pair(
            torch.full((5, 5), 0.2), torch.full((5, 5), 0.2), words, words, ("The sentence", "Shuffled")
        ),
        "flow": chapter01.plot_attention_flow(),
        "recall": chapter02.plot_recall_attention(model, task.tokens[0], task.vocab),
        "lookups": chapter02.plot_lookups(model, task.tokens[1:5], task.vocab),
        "training": history.plot(title="Associative recall: training loss", metric="validation accuracy"),
    }
    for name, figure in figures.items():
        figure = getattr(figure, "figure", figure)
        smallest = audit.smallest_text_px(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        width = Image.open(buffer).width
        plt.close(figure)
        assert audit.shown_px(smallest, width, audit.PHONE_COLUMN_PX) >= audit.PHONE_MIN_PX, (name, width, smallest)
        assert audit.shown_px(smallest, width) >= audit.MIN_PX, (name, width, smallest)


# ---------------------------------------------------------------------------------
# Chapter 3


def test_chapter_3_weight_bars_show_l0_and_l1_and_exact_zeros():
    weights = {"softmax": torch.tensor([0.2, 0.5, 0.3]), "sparsemax": torch.tensor([0.0, 0.7, 0.3])}
    figure = chapter03.plot_weight_bars(weights, ["a", "b", "c"], title="bank")
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert any(title.startswith("softmax") and "= 3" in title for title in titles)
    assert any(title.startswith("sparsemax") and "= 2" in title for title in titles)
    with pytest.raises(ValueError, match="empty"):
        chapter03.plot_weight_bars({}, ["a"])
    with pytest.raises(ValueError, match="3 entries but 2 labels"):
        chapter03.plot_weight_bars(weights, ["a", "b"])


def test_chapter_3_threshold_sweep_score_and_loss_figures():
    ax = chapter03.plot_threshold(torch.tensor([0.2, 1.9, 1.5]), 1.2, ["x", "y", "z"], title="threshold")
    assert ax.get_title() == "threshold" and ax.get_xlabel() == "keys"
    with pytest.raises(ValueError, match="3 scores but 2 labels"):
        chapter03.plot_threshold(torch.tensor([0.2, 1.9, 1.5]), 1.2, ["x", "y"])
    betas = torch.logspace(-1, 1, 5)
    figure = chapter03.plot_beta_sweep(
        betas, {"softmax": torch.rand(5)}, {"softmax": torch.full((5,), 3.0)}, num_keys=3
    )
    assert len(figure.axes) == 2 and all(ax.get_xscale() == "log" and ax.get_title() for ax in figure.axes)
    grid = torch.linspace(-2, 2, 9)
    figure = chapter03.plot_weight_against_score(
        grid, {"hardmax": (grid > 0).float()}, {"hardmax": torch.zeros(9)}, "bank", jumps={"hardmax": 0.0}
    )
    # one panel above the other over the shared score axis, named once, under the lower panel
    assert "bank" in figure.axes[-1].get_xlabel() and "bank" in figure.axes[0].get_ylabel()
    figure = chapter03.plot_losses(
        {"start 1": {"softmax": [1.0, 0.5], "hardmax": [1.0, 1.0]}, "start 2": {"softmax": [2.0, 1.0]}}
    )
    assert [ax.get_title() for ax in figure.axes] == ["start 1", "start 2"]
    assert len(figure.axes[0].lines) == 2


def test_chapter_3_weight_maps_share_one_colour_bar_and_write_every_weight():
    maps = {
        name: torch.softmax(torch.randn(3, 3, generator=torch.Generator().manual_seed(k)), -1)
        for k, name in enumerate(["softmax", "sparsemax", "top-2"])
    }
    figure = chapter03.plot_weight_maps(maps, ["a", "b", "c"])
    heatmaps = [ax for ax in figure.axes if ax.images and ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in heatmaps] == ["softmax", "sparsemax", "top-2"]
    assert all(len(ax.texts) == 9 for ax in heatmaps)
    assert sum(1 for ax in figure.axes if ax.get_ylabel() == "attention weight") == 1  # one colour bar
    with pytest.raises(ValueError, match="empty"):
        chapter03.plot_weight_maps({}, ["a"])


def test_chapter_3_and_5_figures_fit_a_phone():
    """At most PAGE_INCHES wide, no text under 9 pt: at least 7 px on a 390 px phone (issue 29)."""
    import matplotlib.pyplot as plt

    from attention_book.analysis.plotting import PAGE_INCHES
    from tests.helpers import tool

    audit = tool("figure_audit")  # tools/site/figure_audit.py: the smallest text as drawn

    def smallest_font(figure):  # in points
        return audit.smallest_text_px(figure) * 72.0 / figure.dpi

    table = ab.sinusoidal_encoding(16, 8)
    history = ab.History(step_loss=[0.7] * 30, epoch=[1, 2, 3], valid_metric=[0.5, 0.6, 0.9], steps=30)
    grid = torch.linspace(-2, 2, 9)
    figures = [
        chapter03.plot_weight_bars({"a": torch.tensor([0.5, 0.5]), "b": torch.tensor([1.0, 0.0])}, ["x", "y"]),
        chapter03.plot_threshold(torch.tensor([0.2, 1.9, 1.5]), 1.2, ["x", "y", "z"]).figure,
        chapter03.plot_beta_sweep(
            torch.logspace(-1, 1, 5), {"softmax": torch.rand(5)}, {"softmax": torch.full((5,), 3.0)}, 3, marks=[1.0]
        ),
        chapter03.plot_weight_against_score(
            grid, {"hardmax": (grid > 0).float()}, {"hardmax": torch.zeros(9)}, "k", jumps={"hardmax": 0.0}
        ),
        chapter03.plot_losses({"s1": {"softmax": [1.0, 0.5]}, "s2": {"softmax": [2.0, 1.0]}}),
        chapter03.plot_simplex_paths({"softmax": torch.full((2, 3), 1 / 3)}, ["a", "b", "c"]).figure,
        chapter03.plot_weight_maps({"softmax": torch.full((3, 3), 1 / 3)}, ["a", "b", "c"]),
        chapter05.plot_encoding_table(table).figure,
        chapter05.plot_encoding_columns(table, [0, 2]).figure,
        chapter05.plot_order_training({"sinusoidal": [history, history]}, steps_per_epoch=10),
        chapter05.plot_accuracy_by_length(
            {"a": {4: [1.0, 0.9], 9: [0.7, 0.6]}}, (4, 8), predictions={"a: guess": {4: 1.0, 9: 0.5}}
        ).figure,
    ]
    for figure in figures:
        assert figure.get_figwidth() <= PAGE_INCHES and smallest_font(figure) >= 9
        plt.close(figure)


def test_chapter_3_simplex_paths_put_each_weight_vector_in_the_triangle():
    weights = torch.tensor([[1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]])
    ax = chapter03.plot_simplex_paths({"sparsemax": weights}, ["a", "b", "c"], title="paths")
    line = ax.lines[-1]
    assert list(line.get_xdata()) == pytest.approx([0.5, 0.0]) and line.get_ydata()[1] == pytest.approx(0.0)
    assert {"all on a", "all on b", "all on c", "uniform"} <= {text.get_text() for text in ax.texts}
    with pytest.raises(ValueError, match="must sum to 1"):
        chapter03.plot_simplex_paths({"x": torch.ones(2, 3)}, ["a", "b", "c"])


# ---------------------------------------------------------------------------------
# Chapter 4: the dependency parse, and accuracy by relation


def test_the_hand_written_parse_has_gave_as_root_with_three_different_dependents():
    doc, source = parse_example(prefer_trained=False)
    assert "hand-written" in source and doc.text == EXAMPLE_SENTENCE
    assert [token.dep_ for token in doc] == HAND_PARSE["deps"]
    assert [token.pos_ for token in doc] == HAND_PARSE["pos"]
    arcs = relations(doc)
    assert (
        ("gave", "nsubj", "She") in arcs
        and ("gave", "dative", "brother") in arcs
        and ("gave", "dobj", "bicycle") in arcs
    )
    assert len(arcs) == len(doc) - 1  # every word but the root has one head


def test_the_drawing_is_the_same_svg_every_time_with_no_random_ids():
    doc, _ = parse_example(prefer_trained=False)
    first, second = render_parse(doc), render_parse(doc)
    assert isinstance(first, ParseFigure) and first.svg == second.svg
    svg = first._repr_svg_()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert not re.search(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", svg), "displaCy's random hex id survived"
    for label in ("nsubj", "dative", "dobj", "amod", "bicycle"):
        assert label in svg
    assert repr(first) == f"<dependency parse of {EXAMPLE_SENTENCE!r}>"


def test_a_different_sentence_without_a_trained_pipeline_is_a_clear_error():
    with pytest.raises(ValueError, match="only the chapter's sentence"):
        parse_example("The cat sat", prefer_trained=False)
    with pytest.raises(ValueError, match="non-empty string"):
        parse_example("  ")


def test_plot_relation_accuracy_draws_one_bar_per_model_and_relation():
    results = {"a": {"x": 0.5, "y": 1.0}, "b": {"x": 0.25, "y": 0.75}}
    ax = chapter04.plot_relation_accuracy(results)
    assert sum(len(bars) for bars in ax.containers) == 4 and ax.get_ylabel() == "held-out accuracy" and ax.get_title()
    assert ax.figure.get_figwidth() <= 6.0  # PAGE_INCHES: the legend goes under the axes, not beside them


def test_plot_relation_accuracy_with_seeds_shows_the_mean_the_range_and_every_seed():
    results = {"a": {"x": [0.2, 0.4, 0.9], "y": [1.0, 1.0, 1.0]}, "b": {"x": [0.1, 0.3, 0.5], "y": [0.6, 0.7, 0.8]}}
    ax = chapter04.plot_relation_accuracy(
        results, ylabel="test accuracy", reference=("x", 0.25, "guessing")
    )  # drawn by seaborn: barplot with errorbar=("pi", 100), stripplot for the seeds
    heights = sorted(round(bar.get_height(), 6) for bars in ax.containers for bar in bars)
    assert heights == [0.3, 0.5, 0.7, 1.0]  # bars are the means over the seeds
    ranges = sorted(tuple(round(float(v), 6) for v in line.get_ydata()) for line in ax.get_lines())
    assert (0.2, 0.9) in ranges and (0.1, 0.5) in ranges  # a line from the lowest to the highest seed
    dots = sum(len(c.get_offsets()) for c in ax.collections if not hasattr(c, "get_segments"))
    assert dots == 12  # one dot per seed, model and relation
    legend = [text.get_text() for text in ax.get_legend().texts]
    assert ax.get_ylabel() == "test accuracy" and "seeds" in ax.get_legend().get_title().get_text()
    assert "mean of 3 seeds" in legend[0] and legend[-1] == "guessing"
    with pytest.raises(ValueError, match="one of"):
        chapter04.plot_relation_accuracy(results, reference=("z", 0.25, "guessing"))


def test_multi_head_diagram_marks_every_shape_and_legible_text():
    figure = chapter04.plot_multi_head_diagram()
    texts = [t.get_text() for ax in figure.axes for t in ax.texts]
    joined = " ".join(texts)
    for part in (
        "W_Q^{(1)}",
        "W_K^{(1)}",
        "W_V^{(n_h)}",
        "Concat",
        "W_O",
        "MultiHead",
        r"(T,\ d_k)",
        r"(T,\ T)",
        r"(T,\ n_h d_k)",
        r"(T,\ d_{\mathrm{model}})",
    ):
        assert part in joined, part
    assert {"head 1", "head $n_h$", r"$\cdots$"} <= set(texts)  # two heads drawn, dots for the ones between
    assert min(t.get_fontsize() for ax in figure.axes for t in ax.texts) >= 9
    assert figure.get_figwidth() <= 6.0  # PAGE_INCHES: 9 pt text stays >= 7 px on a 390 px phone


# ---------------------------------------------------------------------------------
# Chapter 5


def test_chapter_5_figures_have_labelled_axes_and_titles():
    table = ab.sinusoidal_encoding(16, 8)
    for ax in (
        chapter05.plot_encoding_table(table),
        chapter05.plot_encoding_columns(table, [0, 2, 6]),
        chapter05.plot_similarity(table @ table.T),
        chapter05.plot_offset_scores(table @ table.T),
        chapter05.plot_accuracy_by_length({"a": {4: 1.0, 9: 0.7}}, (4, 8)),
    ):
        assert _labelled(ax)
    history = ab.History(step_loss=[0.7] * 30, epoch=[1, 2, 3], valid_metric=[0.5, 0.5, 0.5], steps=30)
    figure = chapter05.plot_order_training({"no positions": history, "sinusoidal": history}, steps_per_epoch=10)
    # one panel above the other over the shared step axis, named once, under the lower panel
    assert all(ax.get_title() and ax.get_ylabel() for ax in figure.axes) and _labelled(figure.axes[-1])


def test_chapter_5_seed_figures_draw_the_mean_and_a_band_for_the_range():
    runs = [
        ab.History(step_loss=[0.7 - 0.01 * k] * 30, epoch=[1, 2, 3], valid_metric=[0.5, 0.6 + 0.1 * k, 0.9], steps=30)
        for k in range(3)
    ]
    figure = chapter05.plot_order_training({"sinusoidal": runs}, steps_per_epoch=10)
    right = figure.axes[1]
    mean_line = right.get_lines()[0]
    assert list(mean_line.get_ydata()) == pytest.approx([0.5, 0.7, 0.9])
    assert len(right.collections) == 1  # the band over the three seeds
    assert any("3 seeds" in text.get_text() for text in figure.texts)  # the suptitle (get_suptitle: matplotlib 3.8)
    ax = chapter05.plot_accuracy_by_length(
        {"learned": {8: [1.0, 1.0], 12: [0.6, 0.7]}}, (4, 8), predictions={"learned: coin flip": {8: 1.0, 12: 0.71}}
    )
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["learned"].get_ydata()) == pytest.approx([1.0, 0.65])
    assert lines["learned: coin flip"].get_linestyle() == "--"
    assert lines["learned: coin flip"].get_color() == lines["learned"].get_color()
    assert ax.get_ylabel() == "test accuracy" and "2 seeds" in ax.get_title()


def test_chapter_5_heatmaps_are_the_books_heatmap():
    table = ab.sinusoidal_encoding(16, 8)
    ax = chapter05.plot_encoding_table(table)
    assert len(ax.images) == 1 and ax.images[0].get_cmap().name == ab.ATTENTION_CMAP
    torch.testing.assert_close(torch.as_tensor(ax.images[0].get_array()).float(), table)


# ---------------------------------------------------------------------------------
# Chapter 6


def test_chapter_6_figures_have_titles_and_labels():
    figure = chapter06.plot_block_diagram()
    assert len(figure.axes) == 2 and all(ax.get_title() for ax in figure.axes)
    ax = chapter06.plot_mask(ab.causal_mask(4), list("abcd"), list("abcd"), title="causal")
    assert ax.get_title() == "causal" and ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.texts].count("\u2713") == 10
    ax = chapter06.plot_gradient_by_depth([1, 2, 4], [0.3, 0.2, 0.1], [0.3, 0.3, 0.3])
    assert _labelled(ax) and len(ax.get_legend().texts) == 2
    with pytest.raises(ValueError, match="matrix"):
        chapter06.plot_mask(torch.ones(2, 2, 2, dtype=torch.bool))


def test_gradient_by_depth_draws_the_mean_of_the_seeds_and_their_range():
    ax = chapter06.plot_gradient_by_depth([1, 2], [[0.3, 0.5], [0.1, 0.2]], [[0.3, 0.4], [0.3, 0.3]])
    post_line = ax.get_lines()[0]  # drawn by seaborn (seed_band): the mean line and a band of the range
    assert list(post_line.get_ydata()) == pytest.approx([0.4, 0.15])  # the mean of each depth's seeds
    assert len(ax.collections) == 2  # one shaded range per block type
    low, high = ax.collections[0].get_paths()[0].vertices[:, 1].min(), 0.5
    assert low == pytest.approx(0.1) and ax.collections[0].get_paths()[0].vertices[:, 1].max() == pytest.approx(high)
    assert "mean of 2 seeds" in ax.get_legend().texts[0].get_text() and ax.figure.get_figwidth() <= 6.0


def test_encoder_decoder_diagram_names_both_stacks_every_mask_and_the_memory():
    figure = chapter06.plot_encoder_decoder_diagram()
    texts = [t.get_text() for t in figure.axes[0].texts]
    for expected in (
        "ENCODER",
        "DECODER",
        "cross-attention",
        "masked self-attention",
        "source padding",
        "causal + target padding",
        "queries",
    ):
        assert expected in texts, expected
    assert any(t.startswith("memory") for t in texts) and any("keys and" in t for t in texts)
    assert texts.count("add & layer norm") == 5 and texts.count("source padding") == 2
    assert figure.get_figwidth() <= 6.0 and min(t.get_fontsize() for t in figure.axes[0].texts) >= 9


def test_learning_rate_schedules_are_drawn_one_above_the_other_with_the_warmup_marked():
    figure = chapter06.plot_learning_rate_schedules([0.5, 1.0, 0.5, 0.0], [1e-4, 2e-4, 1.5e-4], warmup=2)
    top, bottom = figure.axes
    assert top.get_position().y0 > bottom.get_position().y1 and figure.get_figwidth() <= 6.0
    assert list(top.get_lines()[0].get_ydata()) == [0.5, 1.0, 0.5, 0.0]
    assert bottom.get_lines()[1].get_xdata()[0] == 2  # the dashed line at the end of the warm-up
    assert "inverse square root" in bottom.get_title() and top.get_xlabel() == bottom.get_xlabel() == "step"


def test_plot_decoding_attention_labels_steps_with_fed_and_written_tokens():
    torch.manual_seed(0)
    seq2seq = ab.EncoderDecoder(13, 13, d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=10).eval()
    vocab = ab.SequenceTask("sort", 1, num_symbols=10).vocab
    figure = chapter06.plot_decoding_attention(seq2seq, torch.tensor([[5, 9, 3, ab.PAD]]), vocab)
    top, bottom = figure.axes[:2]  # cross-attention above the causal self-attention
    assert top.get_position().y0 > bottom.get_position().y1 and figure.get_figwidth() <= 6.0
    assert [t.get_text() for t in top.get_xticklabels()] == ["C", "G", "A"]  # the padding is dropped
    assert top.get_yticklabels()[0].get_text().startswith("<bos> \u2192")
    assert top.get_title() and bottom.get_title() and top.get_xlabel() and bottom.get_xlabel()


# ---------------------------------------------------------------------------------
# Chapter 7


def test_chapter_7_figures_have_titles_and_labelled_axes(minilm):
    from attention_book.analysis.heads import HEAD_PATTERNS, strongest_heads

    study = {"arms": {"frozen": {"100": {"test": [0.7, 0.68, 0.72]}, "300": {"test": [0.75, 0.7, 0.8]}}}}
    study["arms"]["scratch"] = {"100": {"test": [0.55, 0.5, 0.6]}}
    ax = chapter07.plot_learning_curves(study, "test", baseline=0.58)
    assert ax.get_xlabel() == "labelled training examples (log scale)" and ax.get_title()
    assert ax.get_ylabel() == "test accuracy\n(axis from 50%)" and ax.get_ylim() == (0.5, 1.0)  # a cut axis says so
    assert {"frozen", "scratch", "always 'fresh' (58%)"} == {t.get_text() for t in ax.get_legend().get_texts()}
    ax = chapter07.plot_similarity_gaps({"same verdict": [0.02, 0.01, 0.03], "a shared neutral word": [0.05, 0.04]})
    assert [t.get_text() for t in ax.get_yticklabels()] == ["same verdict", "a shared neutral word"] and ax.get_xlabel()
    figure = chapter07.plot_patch_attention(torch.rand(16, 16), torch.rand(4, 4), 4, title="a plus")
    assert all(ax.get_title() for ax in figure.axes[:2]) and figure.get_size_inches()[0] <= chapter07.PAGE_INCHES
    scores = {pattern: torch.rand(6, 12) for pattern in HEAD_PATTERNS}
    figure = chapter07.plot_head_scores(scores)
    titled = [ax for ax in figure.axes if ax.get_title()]
    assert len(titled) == len(HEAD_PATTERNS) and {ax.get_xlabel() for ax in titled[-2:]} == {"head"}
    assert {ax.get_ylabel() for ax in titled[::2]} == {"layer"}  # axis names on the outer panels
    heads = strongest_heads(scores)[:2]
    assert figure.get_size_inches()[0] <= chapter07.PAGE_INCHES  # 9 pt text stays >= 7 px on a phone
    figure = chapter07.plot_heads(minilm, "A fine film.", heads)
    assert all(ax.get_xlabel() == "keys (attended to)" for ax in figure.axes[:2])
    assert figure.get_size_inches()[0] <= chapter07.PAGE_INCHES
    assert not minilm.training
    ax = chapter07.plot_contextual_similarity({"same sense": [1.0, 0.9], "different sense": [1.0, 0.8]}, "bank")
    assert "bank" in ax.get_title()


def test_chapter_7_error_bars_are_the_intervals_the_chapter_prints():
    """seaborn draws chapter 7's error bars with the chapter's 95 % t-interval (mean_interval),
    not its own bootstrap, so the figures show the intervals the tables print."""
    import numpy as np

    from attention_book.training.study_results import mean_interval, summarize_study

    study = {"arms": {"frozen": {"100": {"test": [0.7, 0.66, 0.72, 0.69, 0.74]}, "300": {"test": [0.75, 0.7, 0.8]}}}}
    ax = chapter07.plot_learning_curves(study, "test")
    summary = summarize_study(study, "test")["frozen"]
    bars = sorted(y for segment in ax.containers[0].lines[2][0].get_segments() for y in segment[:, 1])
    assert bars == pytest.approx(sorted([*summary[100][1:], *summary[300][1:]]))
    means = ax.lines[0].get_ydata().tolist()
    assert means == pytest.approx([summary[100][0], summary[300][0]])
    with pytest.raises(ValueError, match="split must be"):
        chapter07.plot_learning_curves(study, "train")
    gaps = {"same verdict": [0.01, 0.02, 0.0, 0.015], "a shared neutral word": [0.04, 0.03, 0.05]}
    ax = chapter07.plot_similarity_gaps(gaps)
    whiskers = [line.get_xdata() for line in ax.lines if np.isnan(line.get_xdata()).any()]  # bar and caps, one line
    drawn = sorted(x for xs in whiskers for x in (np.nanmin(xs), np.nanmax(xs)))
    assert drawn == pytest.approx(sorted(x for values in gaps.values() for x in mean_interval(values)[1:]))
    assert [bar.get_width() for bar in ax.patches] == pytest.approx([sum(v) / len(v) for v in gaps.values()])


def test_chapter_7_tagging_curves_draw_one_line_per_arm_and_seed_and_skip_arms_without_runs():
    def run(seed, f1s):
        return {"seed": seed, "validation_by_step": [[50, f1s[0]], [100, f1s[1]]]}

    study = {
        "arms": {
            "fine-tuned": {"runs": [run(0, (0.3, 0.5)), run(1, (0.2, 0.55))]},
            "scratch": {"runs": [run(0, (0.0, 0.0)), run(1, (0.0, 0.01))]},
            "random MiniLM": {"search": []},  # validation only: no runs to draw
        }
    }
    ax = chapter07.plot_tagging_curves(study)
    drawn = [line for line in ax.lines if len(line.get_xdata()) == 2]
    assert len(drawn) == 4 and sorted(max(line.get_ydata()) for line in drawn) == [0.0, 0.01, 0.5, 0.55]
    assert ax.get_title() and ax.get_xlabel() == "training step" and ax.get_ylim() == (0, 1)
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"fine-tuned", "scratch"}
    assert ax.figure.get_size_inches()[0] <= chapter07.PAGE_INCHES


def test_chapter_1_saturation_alt_text_describes_the_figure_drawn():
    """The alt text of chapter 1's saturation figure names what the figure shows: both panel titles,
    both quantities, and nothing the figure no longer has (an old version spoke of a mean largest
    weight and a dotted 1/8 line)."""
    import nbformat

    from tests.helpers import ROOT

    notebook = nbformat.read(ROOT / "notebooks" / "01_attention_math.ipynb", as_version=4)
    cell = next(cell for cell in notebook.cells if cell.cell_type == "code" and "plot_saturation(" in cell.source)
    alt = cell.metadata["mystnb"]["image"]["alt"]
    runs = torch.rand(5, 3)
    figure = chapter01.plot_saturation([2, 8, 32], runs, runs, runs + 1e-3, runs + 1e-3, 8)
    for ax in figure.axes:
        assert f"'{ax.get_title()}'" in alt, (ax.get_title(), alt)
    assert "a(1 - a)" in alt and "share of queries" in alt and "range over 5 seeds" in alt
    lines = [line for ax in figure.axes for line in ax.get_lines()]
    if not any(line.get_linestyle() == ":" for line in lines):
        assert "dotted" not in alt
    assert "mean largest weight" not in alt
