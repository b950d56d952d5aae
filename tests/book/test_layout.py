"""The layout of the package: floors that import only downwards, no cycles, modules named after ideas.

Every module under src/attention_book is parsed with ``ast`` (nothing is imported) and
its imports of attention_book, relative or absolute, at the top or inside a function,
become the edges of an import graph. The floors (see attention_book/__init__.py):

0. foundations: ``_validation``, ``_files``, ``modes``, ``device``;
1. model code: ``attention``, ``key_value``, ``recall``, ``soft_hard``, ``multihead``,
   ``positional``, ``layers``, ``transformer``, ``decoding``, ``pretrained``;
2. ``data.*`` and ``training.*``;
3. ``analysis.*`` and ``figures.*``;
4. ``widgets.*`` and ``exercises.*``;
5. ``grade.*`` (grading a class's notebooks with the exercises' checkers).

A module may import only from its own floor or those below. A package's ``__init__.py``
only re-exports, so it may import anything; a module that imports a package's
``__init__`` depends on everything that ``__init__`` imports, so such an edge counts at
the highest floor the ``__init__`` reaches. Chapter figures (``figures.chapterNN``) are
imported by their chapter's notebook only.

Also here: every third-party import under src/ is a declared runtime dependency in
pyproject.toml, and every declared runtime dependency is used.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

from tests.helpers import ROOT

SOURCE = ROOT / "src"
PACKAGE = "attention_book"

FLOOR_OF = {
    "_validation": 0, "_files": 0, "modes": 0, "device": 0,
    "rnn_encoder_decoder": 1, "attention": 1, "key_value": 1, "recall": 1, "soft_hard": 1, "multihead": 1, "positional": 1,
    "layers": 1, "transformer": 1, "decoding": 1, "pretrained": 1,
    "data": 2, "training": 2,
    "analysis": 3, "figures": 3,
    "widgets": 4, "exercises": 4,
    "grade": 5,
}  # fmt: skip
FLOOR_NAMES = {
    0: "foundations",
    1: "model code",
    2: "data and training",
    3: "analysis and figures",
    4: "widgets and exercises",
    5: "grading",
}

# Import names whose distribution is not named like them (used when the package is not installed here).
DISTRIBUTION_OF = {
    "PIL": "pillow",
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
    "IPython": "ipython",
}


@dataclass
class Module:
    name: str  # dotted, e.g. "attention_book.data.tasks"
    path: Path
    is_package: bool  # an __init__.py
    tree: ast.Module
    imports: dict[str, int] = field(default_factory=dict)  # imported module -> first line

    @property
    def relative(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    @property
    def top(self) -> str | None:
        """The first name under attention_book ("data" for attention_book.data.tasks); None for the package itself."""
        parts = self.name.split(".")
        return parts[1] if len(parts) > 1 else None


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _resolve(module: Module, node: ast.ImportFrom, names: set[str]) -> list[str]:
    """The modules of attention_book that a ``from ... import ...`` statement reads."""
    if node.level:
        package = module.name if module.is_package else module.name.rsplit(".", 1)[0]
        parts = package.split(".")
        if node.level - 1 >= len(parts):
            raise AssertionError(f"{module.relative}:{node.lineno}: a relative import goes above the package")
        base = ".".join(parts[: len(parts) - (node.level - 1)])
        base = f"{base}.{node.module}" if node.module else base
    else:
        base = node.module or ""
    if base != PACKAGE and not base.startswith(PACKAGE + "."):
        return []
    targets = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        targets.append(submodule if submodule in names else base)  # ``from . import tasks`` reads the module tasks
    return targets


def load_modules() -> dict[str, Module]:
    modules = {}
    for path in sorted((SOURCE / PACKAGE).rglob("*.py")):
        name, is_package = _module_name(path)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    names = set(modules)
    for module in modules.values():
        for node in ast.walk(module.tree):  # every import, also inside functions, classes and try blocks
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [
                    alias.name for alias in node.names if alias.name == PACKAGE or alias.name.startswith(PACKAGE + ".")
                ]
            elif isinstance(node, ast.ImportFrom):
                targets = _resolve(module, node, names)
            for target in targets:
                assert target in names, (
                    f"{module.relative}:{node.lineno} imports {target}, which is not a module of the package"
                )
                if target != module.name:
                    module.imports.setdefault(target, node.lineno)
    return modules


MODULES = load_modules()


def own_floor(module: Module) -> int | None:
    if module.top is None:
        return None
    assert module.top in FLOOR_OF, (
        f"{module.relative} is on no floor: add {module.top!r} to FLOOR_OF (and to the package docstring)"
    )
    return FLOOR_OF[module.top]


def reached_floor(name: str, seen: frozenset = frozenset()) -> int:
    """The floor a module stands for when imported: its own, or for a re-exporting __init__ the highest it reaches."""
    module = MODULES[name]
    floor = own_floor(module)
    if not module.is_package:
        return floor
    reached = [reached_floor(target, seen | {name}) for target in module.imports if target not in seen]
    return max([f for f in [floor, *reached] if f is not None], default=0)


# ---------------------------------------------------------------------------------
# The graph is what the files say


def test_the_graph_sees_relative_absolute_and_function_level_imports():
    """A check on the parser itself, on a made-up package: every kind of import becomes an edge."""
    source = (
        "from .attention import softmax\n"
        "from ..data.tasks import PAD\n"
        "from .. import modes\n"
        "import attention_book.device\n"
        "from attention_book.analysis import formatting\n"
        "def f():\n"
        "    from ..figures.chapter01 import plot_timings\n"
        "try:\n"
        "    import attention_book.exercises as ex\n"
        "except ImportError:\n"
        "    pass\n"
    )
    names = {
        "attention_book.data.attention",
        "attention_book.data.tasks",
        "attention_book.modes",
        "attention_book.device",
        "attention_book.analysis",
        "attention_book.analysis.formatting",
        "attention_book.figures.chapter01",
        "attention_book.exercises",
        "attention_book",
    }
    module = Module(
        "attention_book.data.example", ROOT / "src/attention_book/data/example.py", False, ast.parse(source)
    )
    found = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.ImportFrom):
            found += _resolve(module, node, names)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    assert sorted(found) == sorted(
        [
            "attention_book.data.attention",
            "attention_book.data.tasks",
            "attention_book.modes",
            "attention_book.device",
            "attention_book.analysis.formatting",
            "attention_book.figures.chapter01",
            "attention_book.exercises",
        ]
    )
    assert len(MODULES) > 40 and MODULES["attention_book.data.tasks"].imports  # the real package was read


# ---------------------------------------------------------------------------------
# (a) no cycles, (b) floors


def _cycles() -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(name):
        index[name] = low[name] = counter[0]
        counter[0] += 1
        stack.append(name)
        on_stack.add(name)
        for target in MODULES[name].imports:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))
    for name in sorted(MODULES):
        if name not in index:
            visit(name)
    return found


def test_no_module_imports_itself_back_through_others():
    cycles = _cycles()
    assert not cycles, "import cycles (each line: modules that import each other, directly or not):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_the_cycle_finder_finds_a_cycle_through_several_modules(monkeypatch):
    a, b, c = (Module(f"{PACKAGE}.{name}", ROOT / f"{name}.py", False, ast.parse("")) for name in ("a", "b", "c"))
    a.imports, b.imports, c.imports = {b.name: 1}, {c.name: 1}, {a.name: 1}
    monkeypatch.setattr(sys.modules[__name__], "MODULES", {m.name: m for m in (a, b, c)})
    assert _cycles() == [[a.name, b.name, c.name]]


def test_every_module_imports_only_from_its_own_floor_or_below():
    problems = []
    for module in MODULES.values():
        if module.is_package:
            continue  # an __init__ re-exports; importing it counts at the floor it reaches
        floor = own_floor(module)
        for target, line in module.imports.items():
            reached = reached_floor(target)
            if reached > floor:
                problems.append(
                    f"{module.relative}:{line} (floor {floor}, {FLOOR_NAMES[floor]}) imports {target} "
                    f"(floor {reached}, {FLOOR_NAMES[reached]})"
                )
    assert not problems, "imports from a higher floor:\n" + "\n".join(problems)


def test_the_floor_check_catches_an_upward_import():
    """The rule above can fail: model code importing a figure, or an __init__ that re-exports one, is caught."""
    transformer = MODULES["attention_book.transformer"]
    assert own_floor(transformer) == 1
    assert reached_floor("attention_book.figures.chapter04") == 3 > own_floor(transformer)
    assert reached_floor(PACKAGE) >= 3  # the package re-exports the heatmap (analysis, floor 3)


def test_nothing_in_the_library_imports_the_chapter_figures():
    """figures.chapterNN is imported only by chapter NN's notebook: no module (an __init__ neither) imports it."""
    importers = [
        f"{module.relative}:{line} imports {target}"
        for module in MODULES.values()
        for target, line in module.imports.items()
        if target == f"{PACKAGE}.figures" or target.startswith(f"{PACKAGE}.figures.")
    ]
    assert not importers, "the chapter figures are for the chapters' notebooks only:\n" + "\n".join(importers)


FIGURES_IMPORT = re.compile(r"attention_book\.figures\.chapter(\d\d)|from attention_book\.figures import ([\w, ]+)")


def test_each_chapters_figures_are_imported_only_by_that_chapter():
    problems = []
    used = set()
    for notebook in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in notebook.parts:
            continue
        chapter = notebook.name[:2]
        for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            for match in FIGURES_IMPORT.finditer(source):
                numbers = [match.group(1)] if match.group(1) else re.findall(r"chapter(\d\d)", match.group(2))
                for number in numbers:
                    used.add(number)
                    if number != chapter:
                        problems.append(f"{notebook.relative_to(ROOT)} imports figures.chapter{number}")
    assert not problems, "\n".join(problems)
    modules = {
        name.rsplit("chapter", 1)[1] for name in MODULES if re.fullmatch(rf"{PACKAGE}\.figures\.chapter\d\d", name)
    }
    assert used <= modules, f"notebooks import figure modules that do not exist: {sorted(used - modules)}"


# ---------------------------------------------------------------------------------
# (c) modules are named after ideas, not chapters


def test_no_module_is_named_after_a_chapter_outside_figures_and_exercises():
    misnamed = [
        module.relative
        for module in MODULES.values()
        if re.search(r"chapter\d", module.name.rsplit(".", 1)[-1])
        and module.name.split(".")[1:2] not in (["figures"], ["exercises"])
    ]
    assert not misnamed, f"modules named after a chapter outside figures/ and exercises/: {misnamed}"


def test_no_helpers_modules_and_the_old_modules_are_gone():
    helpers = [module.relative for module in MODULES.values() if module.name.endswith("_helpers")]
    assert not helpers, f"modules named *_helpers: {helpers}"
    old = ["tasks", "training", "plotting", "datasets"] + [f"chapter0{n}_helpers" for n in range(1, 8)]
    left = [name for name in old if (SOURCE / PACKAGE / f"{name}.py").exists()]
    assert not left, f"modules of the old layout are back: {left}"


# ---------------------------------------------------------------------------------
# (d) every module says which chapters use it


@pytest.mark.parametrize("name", sorted(MODULES), ids=lambda name: MODULES[name].relative)
def test_every_module_docstring_names_the_chapters_that_use_it(name):
    docstring = ast.get_docstring(MODULES[name].tree) or ""
    assert docstring, f"{MODULES[name].relative} has no module docstring"
    assert re.search(r"[Cc]hapter", docstring), (
        f"{MODULES[name].relative}: the module docstring does not say which chapter(s) use it"
    )


# ---------------------------------------------------------------------------------
# (e) runtime dependencies: declared when imported, imported when declared


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalise(re.split(r"[<>=!~\[ ;@]", requirement.strip(), maxsplit=1)[0])


def third_party_imports() -> dict[str, list[str]]:
    """Top-level names of every absolute import under src/ that is neither the standard library nor the package."""
    found: dict[str, list[str]] = {}
    for module in MODULES.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top != PACKAGE and top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(top, []).append(f"{module.relative}:{node.lineno}")
    return found


def distribution_of(import_name: str) -> str:
    installed = importlib.metadata.packages_distributions().get(import_name)
    if installed:
        return _normalise(installed[0])
    return _normalise(DISTRIBUTION_OF.get(import_name, import_name))


def declared_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_requirement_name(requirement) for requirement in project["dependencies"]}


def test_the_dependency_check_sees_imports_inside_functions_and_maps_import_names_to_distributions():
    imports = third_party_imports()
    assert {"torch", "numpy", "matplotlib", "ipywidgets", "tqdm"} <= set(imports)
    assert "spacy" in imports  # imported inside a function (chapter 4's parse)
    assert distribution_of("PIL") == "pillow" and distribution_of("yaml") == "pyyaml"
    assert _requirement_name("ipywidgets>=8.0,<9") == "ipywidgets" and _requirement_name("Pillow >= 9") == "pillow"


def test_every_third_party_import_under_src_is_a_declared_runtime_dependency():
    declared = declared_dependencies()
    missing = {
        f"{name} (distribution {distribution_of(name)})": places
        for name, places in sorted(third_party_imports().items())
        if distribution_of(name) not in declared
    }
    assert not missing, "imported under src/ but not in pyproject.toml's [project] dependencies:\n" + "\n".join(
        f"  {name}: {', '.join(places[:3])}" for name, places in missing.items()
    )


def test_every_declared_runtime_dependency_is_imported_under_src():
    imported = {distribution_of(name) for name in third_party_imports()}
    unused = sorted(declared_dependencies() - imported)
    assert not unused, f"declared in pyproject.toml's [project] dependencies but never imported under src/: {unused}"
