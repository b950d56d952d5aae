"""The exercise-notebook generator (tools/notebooks/generate_exercises.py) on small, made-up chapters."""

from __future__ import annotations

import textwrap

import nbformat
import pytest

from tests.helpers import ROOT, SAMPLE_EXERCISES, tool

generate = tool("generate_exercises")  # tools/notebooks/generate_exercises.py
GenerateError, fill_source, stub_source = generate.GenerateError, generate.fill_source, generate.stub_source

BADGE = (
    "[![Open In Colab](../img/colab-badge.svg)](https://colab.research.google.com/github/o/r/blob/main/notebooks/03_x.ipynb)\n"
    "[Do the exercises in Colab](https://colab.research.google.com/github/o/r/blob/main/notebooks/exercises/03_x.ipynb)"
)


def _run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<stub>", "exec"), namespace)
    return namespace


def _stubbed(code: str, exercise_id: str = "3.1") -> str:
    source = f"# BEGIN SOLUTION\n{textwrap.dedent(code).strip()}\n# END SOLUTION"
    return stub_source(source, exercise_id)


def test_a_function_keeps_decorators_signature_and_docstring_and_raises_when_called():
    stub = _stubbed(
        '''
        import functools

        @functools.lru_cache(maxsize=None)
        def weights(
            query: "torch.Tensor",   # (d_k,)
            keys: "torch.Tensor",
        ) -> "torch.Tensor":
            """Softmax of the scaled scores.

            Two lines of docstring.
            """
            secret = 41 + 1
            return secret
        '''
    )
    assert "@functools.lru_cache(maxsize=None)" in stub
    assert 'query: "torch.Tensor",   # (d_k,)' in stub
    assert "Two lines of docstring." in stub
    assert "secret" not in stub
    assert stub.startswith("# BEGIN SOLUTION\n") and stub.endswith("\n# END SOLUTION")
    namespace = _run(stub)  # defining the stub does not raise
    with pytest.raises(NotImplementedError, match=r"^Exercise 3\.1: not implemented yet$"):
        namespace["weights"](1, 2)
    assert namespace["weights"].__wrapped__.__doc__.startswith("Softmax of the scaled scores.")


def test_a_function_without_docstring_loses_its_comments_and_body():
    stub = _stubbed(
        """
        def f(x):
            # the trick is to add one
            return x + 1
        """
    )
    assert "trick" not in stub and "x + 1" not in stub
    with pytest.raises(NotImplementedError):
        _run(stub)["f"](1)


def test_a_class_keeps_its_structure_and_every_method_is_stubbed():
    stub = _stubbed(
        '''
        class Head(object):
            """One attention head."""

            scale: float = 2.0

            def __init__(self, d: int):
                """Store d."""
                self.d = d * 2

            @staticmethod
            def helper(x):
                return x * 3

            @property
            def size(self) -> int:
                return self.d

            class Config:
                """Nested."""

                def build(self):
                    return 4
        '''
    )
    assert "d * 2" not in stub and "x * 3" not in stub and "return 4" not in stub
    assert "@staticmethod" in stub and "@property" in stub and "scale: float = 2.0" in stub
    head = _run(stub)["Head"]
    assert head.__doc__ == "One attention head." and head.scale == 2.0
    assert head.__init__.__doc__ == "Store d."
    with pytest.raises(NotImplementedError, match="Exercise 3.1"):
        head(3)
    with pytest.raises(NotImplementedError):
        head.helper(1)
    with pytest.raises(NotImplementedError):
        head.Config().build()


def test_one_line_functions_imports_and_code_around_the_region():
    source = (
        "import math\n# BEGIN SOLUTION\nfrom math import sqrt\ndef g(x): return sqrt(x)\n# END SOLUTION\nvalue = 1\n"
    )
    stub = stub_source(source, "4.2")
    assert stub.startswith("import math\n# BEGIN SOLUTION\nfrom math import sqrt\n")
    assert stub.endswith("# END SOLUTION\nvalue = 1\n")
    assert "return sqrt" not in stub
    namespace = _run(stub)
    assert namespace["value"] == 1
    with pytest.raises(NotImplementedError, match="Exercise 4.2"):
        namespace["g"](4)


def test_filling_a_stub_gives_back_the_solution():
    source = "x = 1\n# BEGIN SOLUTION\ndef f(a):\n    '''Doc.'''\n    return a\n# END SOLUTION\n# BEGIN SOLUTION\nclass C:\n    def m(self):\n        return 2\n# END SOLUTION"
    stub = stub_source(source, "1.1")
    assert stub != source
    assert fill_source(stub, source) == source


@pytest.mark.parametrize(
    "source",
    [
        "# BEGIN SOLUTION\ndef f():\n    return 1\n",
        "def f():\n    return 1\n# END SOLUTION",
        "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION",
        "# BEGIN SOLUTION\ndef f(:\n# END SOLUTION",
    ],
    ids=["no end", "no begin", "nested", "syntax error"],
)
def test_broken_solution_regions_are_reported(source):
    with pytest.raises(GenerateError):
        stub_source(source, "1.1")


# ---------------------------------------------------------------------------------
# Whole notebooks


def _chapter(check_output: bool = True) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cells = [
        nbformat.v4.new_markdown_cell(f"# 3. A chapter\n\n{BADGE}", metadata={"tags": ["chapter-header"]}),
        nbformat.v4.new_code_cell("import os", metadata={"tags": ["colab-setup", "hide-input"]}),
        nbformat.v4.new_code_cell("print(1)"),
        nbformat.v4.new_markdown_cell("### Exercise 3.1: First"),
        nbformat.v4.new_code_cell(
            "# BEGIN SOLUTION\ndef f(x):\n    return x\n# END SOLUTION", metadata={"tags": ["hide-input", "keep"]}
        ),
        nbformat.v4.new_code_cell('check("3.1", f)', metadata={"tags": ["nbval-check-output"]}),
        nbformat.v4.new_markdown_cell("### Exercise 3.2: Second"),
        nbformat.v4.new_code_cell(
            "# BEGIN SOLUTION\ndef g(x):\n    return x\n# END SOLUTION", metadata={"tags": ["hide-input"]}
        ),
        nbformat.v4.new_code_cell("summary(3)"),
    ]
    for number, cell in enumerate(cells):
        cell["id"] = f"cell-{number}"
        if cell.cell_type == "code":
            cell.execution_count = number
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"output {number}\n")]
    cells[4].outputs = cells[7].outputs = []
    cells[5].outputs = [nbformat.v4.new_output("stream", name="stdout", text="✓ Exercise 3.1 (First): passed.\n")]
    if not check_output:
        cells[5].outputs = []
    notebook.cells = cells
    return notebook


def test_the_exercise_notebook_of_a_chapter():
    chapter = _chapter()
    notebook = generate.exercise_notebook(chapter, "notebooks/03_x.ipynb", "notebooks/exercises/03_x.ipynb")
    cells = notebook.cells
    assert chapter.cells[4].source.endswith("return x\n# END SOLUTION")  # the chapter is untouched
    # header: marked as the exercise version, one badge pointing at itself, its image by absolute URL
    # (student notebooks are portable markdown: tools/notebooks/colab_edition.py)
    raw = generate.colab_edition.book().raw
    assert cells[0].source == (
        "# 3. A chapter: exercises\n\n"
        f"[![Open In Colab]({raw}img/colab-badge.svg)](https://colab.research.google.com/github/o/r/blob/main/notebooks/exercises/03_x.ipynb)"
    )
    # banner right after the setup cell
    assert cells[2].metadata["tags"] == ["exercise-banner"] and cells[2].cell_type == "markdown"
    assert (
        "pytest --nbval-lax --nbval-sanitize-with nbval_sanitize.cfg notebooks/exercises/03_x.ipynb" in cells[2].source
    )
    assert "summary(3)" in cells[2].source
    assert [cell.get("id") for cell in cells] == ["cell-0", "cell-1", "exercise-banner"] + [
        f"cell-{n}" for n in range(2, 9)
    ]
    solution_1, check_1, solution_2 = cells[5], cells[6], cells[8]
    assert 'raise NotImplementedError("Exercise 3.1: not implemented yet")' in solution_1.source
    # 3.2 has no check cell after it: its id comes from the heading above
    assert 'raise NotImplementedError("Exercise 3.2: not implemented yet")' in solution_2.source
    assert solution_1.metadata["tags"] == ["keep"] and "tags" not in solution_2.metadata
    assert cells[1].metadata["tags"] == ["colab-setup", "hide-input"]
    # check cells keep output and count, labelled as what a passing answer prints; everything else is cleared
    assert check_1.execution_count == 5
    assert check_1.outputs[0].text == generate.EXPECTED_LABEL + "✓ Exercise 3.1 (First): passed.\n"
    assert chapter.cells[5].outputs[0].text == "✓ Exercise 3.1 (First): passed.\n"  # the chapter keeps its own
    for cell in cells:
        if cell.cell_type == "code" and cell is not check_1:
            assert cell.outputs == [] and cell.execution_count is None
    assert "widgets" not in notebook.metadata
    nbformat.validate(notebook)


def test_a_check_cell_without_its_stored_output_stops_the_generator():
    with pytest.raises(GenerateError, match="execute the chapter first"):
        generate.exercise_notebook(
            _chapter(check_output=False), "notebooks/03_x.ipynb", "notebooks/exercises/03_x.ipynb"
        )


def test_the_command_line_writes_checks_and_removes_orphans(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    source, target = tmp_path / "notebooks", tmp_path / "notebooks" / "exercises"
    source.mkdir()
    nbformat.write(_chapter(), source / "03_x.ipynb")
    arguments = [str(source), str(target)]
    assert generate.main(["--check", *arguments]) == 1
    assert "03_x.ipynb: missing" in capsys.readouterr().out
    assert generate.main(arguments) == 0
    written = (target / "03_x.ipynb").read_bytes()
    assert (
        b"pytest --nbval-lax --nbval-sanitize-with nbval_sanitize.cfg notebooks/exercises/03_x.ipynb" in written
    )  # paths relative to the project
    assert generate.main(arguments) == 0 and (target / "03_x.ipynb").read_bytes() == written  # same bytes
    assert generate.main(["--check", *arguments]) == 0
    capsys.readouterr()
    # a changed chapter makes the exercise notebook out of date
    chapter = _chapter()
    chapter.cells[2].source = "print(2)"
    nbformat.write(chapter, source / "03_x.ipynb")
    assert generate.main(["--check", *arguments]) == 1
    assert "03_x.ipynb: out of date" in capsys.readouterr().out
    # an exercise notebook whose chapter is gone is reported, then removed
    nbformat.write(_chapter(), target / "04_gone.ipynb")
    assert generate.main(["--check", *arguments]) == 1
    assert "04_gone.ipynb: its chapter no longer exists" in capsys.readouterr().out
    assert generate.main(arguments) == 0
    assert not (target / "04_gone.ipynb").exists()
    assert generate.main(["--check", *arguments]) == 0


def test_a_broken_chapter_is_named_and_the_others_are_still_written(tmp_path, capsys):
    source, target = tmp_path / "nb", tmp_path / "nb" / "exercises"
    source.mkdir()
    nbformat.write(_chapter(check_output=False), source / "03_broken.ipynb")
    nbformat.write(_chapter(), source / "05_fine.ipynb")
    assert generate.main([str(source), str(target)]) == 1
    assert "03_broken.ipynb" in capsys.readouterr().err
    assert (target / "05_fine.ipynb").is_file() and not (target / "03_broken.ipynb").exists()


def test_the_real_chapters_generate_without_problems():
    for source in (ROOT / "notebooks", SAMPLE_EXERCISES):
        _, problems = generate.expected_outputs(source, source / "exercises")
        assert not problems, "\n".join(problems.values())


def test_the_sanitizer_turns_a_labelled_pass_line_back_into_the_pass_line_and_nothing_else():
    """What nbval compares in a student notebook: the stored, labelled line after nbval_sanitize.cfg
    equals a passing answer's line, and differs from a failing one's (so nbval-lax fails on it)."""
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "nbval_sanitize.cfg").read_text(encoding="utf-8"))

    def sanitized(text: str) -> str:
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    passing = "✓ Exercise 5.5 (Add positions to token embeddings): passed.\n"
    failing = "✗ Exercise 5.5 (Add positions to token embeddings): not implemented yet. Replace the `raise NotImplementedError` with your code.\n"
    stored = generate.EXPECTED_LABEL + passing
    assert not stored.startswith("✓") and generate.unlabel(stored) == passing
    assert sanitized(stored) == sanitized(passing)
    assert sanitized(stored) != sanitized(failing)
    assert sanitized(passing) == passing  # chapters' own pass lines are untouched
