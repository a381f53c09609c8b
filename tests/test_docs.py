"""The documentation: every example in the pages and in the public docstrings runs and gives what it
shows, the pages build with Sphinx with warnings as errors, and the Cython example compiles and agrees
with the Python API.

The Sphinx build and the Cython example take seconds and are marked ``slow``
(``pytest -m "not slow" tests/test_docs.py`` for a quick loop).
"""

from __future__ import annotations

import doctest
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import synet

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.rst")) + [ROOT / "README.rst"]  # every page with >>> examples, and the README
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE  # the same as docs/conf.py's doctest_default_flags


def _subprocess_env() -> dict:
    """The environment of a child Python that imports the same synet as this test session."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def _run_doctests(tests) -> tuple[int, str]:
    """(examples run, report of the failures) of doctest.DocTest objects."""
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    return runner.tries, "".join(report)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples(page):
    """The >>> examples of a page run in order, sharing their names, and print what the page shows
    (``np`` and ``synet`` are imported for them, as docs/conf.py's doctest_global_setup does)."""
    if "threadpool_limits" in page.read_text(encoding="utf-8"):
        pytest.importorskip("threadpoolctl")
    text = page.read_text(encoding="utf-8")
    test = doctest.DocTestParser().get_doctest(text, {"np": np, "synet": synet}, page.name, str(page), 0)
    try:
        _, report = _run_doctests([test])
    finally:
        synet.set_num_threads(None)  # a page may change the thread count
    assert not report, report


def public_modules():
    """The modules that define the objects of synet.__all__ (their docstrings are the API reference)."""
    names = {getattr(getattr(synet, name), "__module__", None) for name in synet.__all__}
    return sorted(name for name in names if name and name.split(".")[0] == "synet")


@pytest.mark.parametrize("module", public_modules())
def test_docstring_examples(module):
    """The Examples sections of the public API's docstrings (compiled modules included) run and agree."""
    mod = importlib.import_module(module)
    tests = doctest.DocTestFinder(exclude_empty=True).find(mod, module, extraglobs={"np": np, "synet": synet})
    _, report = _run_doctests(tests)
    assert not report, report


def test_docstring_examples_are_found():
    """The compiled modules' docstrings reach doctest: an empty run would pass unnoticed."""
    for module in ("synet._gather", "synet._quantized_add", "synet._deconvolution"):
        mod = importlib.import_module(module)
        tests = doctest.DocTestFinder(exclude_empty=True).find(mod, module, extraglobs={"np": np})
        assert sum(len(t.examples) for t in tests) > 0, module


def test_api_page_lists_every_public_name():
    text = (DOCS / "api.rst").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. (?:autofunction|autoclass|autoexception|data):: ([\w.]+)", text, re.M))
    assert set(synet.__all__) - documented == set()


def test_readme_first_screen_has_the_two_commands():
    """The README's first screen gives the bench and test commands exactly (CI runs the second)."""
    first_screen = "\n".join((ROOT / "README.rst").read_text(encoding="utf-8").splitlines()[:40])
    assert 'pip install -e ".[bench]" && python -m synet bench' in first_screen
    assert 'pip install ".[test]" && pytest tests' in first_screen


@pytest.mark.parametrize("name", ["README.rst", "CHANGELOG.rst"])
def test_root_documents_are_valid_restructuredtext(name):
    """PyPI renders the README as reStructuredText and refuses one with errors; warnings count too."""
    core = pytest.importorskip("docutils.core")
    core.publish_doctree((ROOT / name).read_text(encoding="utf-8"), source_path=name,
                         settings_overrides={"halt_level": 2, "report_level": 2, "file_insertion_enabled": False,
                                             "raw_enabled": False})


def _sphinx(builder: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, "-d", str(tmp_path / "doctrees"),
         str(DOCS), str(tmp_path / builder)],
        cwd=tmp_path, env=_subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]


@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    """``sphinx-build -W -b html docs`` (autodoc of the compiled modules, numpydoc, the theme, every
    reference), then ``-b doctest``: the pages' examples and those of the docstrings on the API page."""
    for module in ("sphinx", "numpydoc", "furo"):
        pytest.importorskip(module)
    pytest.importorskip("threadpoolctl")
    _sphinx("html", tmp_path)
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "html" / "_images" / "bench.png").is_file()
    _sphinx("doctest", tmp_path)


@pytest.mark.slow
def test_cython_example_builds_and_agrees(tmp_path):
    """docs/examples/cython: the extension of the Cython API page compiles against this synet and gives
    the Python API's results."""
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    for item in (DOCS / "examples" / "cython").iterdir():
        if item.suffix in (".py", ".pyx"):
            shutil.copy(item, tmp_path)
    result = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path,
                            env=_subprocess_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        example = importlib.import_module("synet_example")
    finally:
        sys.path.remove(str(tmp_path))
    rng = np.random.default_rng(0)

    src = rng.standard_normal((3, 10)).astype(np.float32)
    idx = rng.integers(-10, 10, (3, 4))
    dst = np.empty((3, 4), np.float32)
    assert example.gather_rows(src, idx, dst) == 0
    np.testing.assert_array_equal(dst, synet.gather_elements(src, idx, 1))
    idx[1, 2] = 10
    assert example.gather_rows(src, idx, dst) == 2 and dst[1, 2] == 0  # SYNET_INDEX_ERROR

    add = synet.QuantizedAdd([16], "u8", 0.01, 47, [16], "u8", 0.02, 30, "relu", None, "u8", 0.015, 38)
    a = rng.integers(0, 256, (50, 16), dtype=np.uint8)
    b = rng.integers(0, 256, (50, 16), dtype=np.uint8)
    out = np.empty_like(a)
    assert example.add_rows(add, a, b, out) == 0
    np.testing.assert_array_equal(out, np.stack([add.forward(a[r], b[r]) for r in range(len(a))]))

    deconv = synet.Deconvolution16b(2, synet.ConvParams.deconvolution(32, 8, 8, 16, kernel=4, stride=2, pad=1))
    deconv.set_params(rng.standard_normal((32, 16, 4, 4)).astype(np.float32), rng.standard_normal(16))
    x = rng.standard_normal((2, 32, 8, 8)).astype(np.float32)
    y = np.empty((2, 16, 16, 16), np.float32)
    assert example.deconvolve(deconv, x.ravel(), y.ravel(), 2) == 0
    np.testing.assert_array_equal(y, deconv.forward(x))
    with pytest.raises(RuntimeError, match="set_params"):
        example.deconvolve(synet.Deconvolution16b(1, deconv.conv), x.ravel(), y.ravel())

    # the example checks the arrays' sizes against the context (it read and wrote past them: ASan
    # heap-buffer-overflow); Deconvolution16b.batch is init's batch
    assert deconv.batch == 2 and synet.Deconvolution16b().batch is None
    with pytest.raises(ValueError, match="gather_rows"):
        example.gather_rows(src, idx, np.empty((1, 4), np.float32))
    with pytest.raises(ValueError, match="add_rows"):
        example.add_rows(add, a[:, :8].copy(), b[:, :8].copy(), out[:, :8].copy())
    with pytest.raises(ValueError, match="deconvolve"):
        example.deconvolve(deconv, x[:1].ravel(), y.ravel())
    with pytest.raises(ValueError, match="deconvolve"):
        example.deconvolve(deconv, x.ravel(), y[:1].ravel())

    values = rng.standard_normal(1000).astype(np.float32)
    rounded = np.empty_like(values)
    example.bf16_round_trip(values, rounded)
    np.testing.assert_array_equal(rounded, synet.round_to_bfloat16(values))
