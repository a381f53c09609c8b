"""Builds the example extension of docs/cython_api.rst against the installed synet:
``pip install .`` (or ``python setup.py build_ext --inplace``) in this folder."""

from Cython.Build import cythonize
from setuptools import Extension, setup

import synet

extension = Extension("synet_example", ["synet_example.pyx"], include_dirs=[synet.get_include()])
setup(name="synet-example", ext_modules=cythonize([extension], language_level=3))
