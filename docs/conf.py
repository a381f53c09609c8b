"""Sphinx configuration of synet's documentation.

Build with ``sphinx-build -W docs docs/_build`` (``pip install ".[docs]"`` first). The API pages are
read from the compiled modules: an in-place build of this checkout
(``python setup.py build_ext --inplace``) is used when there is one, otherwise the installed synet.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _use_inplace_build_or_installed() -> None:
    """Import synet from this checkout when it was built in place, else keep the checkout's uncompiled
    source folder off sys.path (``python -m sphinx`` from the root would put it first) so that the
    installed package is imported."""
    built = any((ROOT / "synet").glob("_kernels.*.so")) or any((ROOT / "synet").glob("_kernels.*.pyd"))
    if built:
        sys.path.insert(0, str(ROOT))
    else:
        sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != ROOT]


_use_inplace_build_or_installed()

import synet  # noqa: E402

project = "synet"
author = "synet developers"
copyright = "synet developers"
version = release = synet.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "numpydoc",
]

source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
nitpicky = False

# -- autodoc / numpydoc -------------------------------------------------------------------------
autodoc_member_order = "bysource"  # members are listed explicitly in api.rst
autodoc_typehints = "none"          # the compiled modules embed their signatures
numpydoc_show_class_members = False  # methods are listed by autodoc itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# Cython 3.3 embeds a class signature whose keyword-only arguments come before a trailing "*"
# ("..., dst_zero=0, axis=1, *)"). The keyword-only names of each such class are listed here and the
# "*" is put back before the first of them; an unlisted class with that defect fails the build.
KEYWORD_ONLY = {"synet.QuantizedAdd": "axis"}


def _fix_keyword_only(app, what, name, obj, options, signature, return_annotation):
    if not signature or not signature.endswith(", *)"):
        return None
    first = KEYWORD_ONLY.get(name)
    params = signature[1:-len(", *)")].split(", ")
    names = [p.split("=")[0] for p in params]
    if first is None or first not in names:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(f"{name}: signature {signature} has a trailing '*'; list its first "
                                            f"keyword-only argument in docs/conf.py KEYWORD_ONLY")
        return None
    at = names.index(first)
    return "(" + ", ".join(params[:at] + ["*"] + params[at:]) + ")", return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _fix_keyword_only, priority=100)  # before numpydoc's handler


# -- doctest (sphinx-build -b doctest docs DIR runs every >>> example of the pages) -------------
import doctest  # noqa: E402

doctest_global_setup = """
import numpy as np
import synet
from synet import *  # the API page's docstring examples name the module's objects unqualified
"""
doctest_global_cleanup = "synet.set_num_threads(None)"
doctest_default_flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE  # as tests/test_docs.py

# -- HTML ---------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"synet {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
