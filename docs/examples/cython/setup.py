"""Builds the example extension of docs/cython_api.rst against the installed synet:
``pip install .`` (or ``python setup.py build_ext --inplace``) in this folder."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

import synet

extension = Extension("synet_example", ["synet_example.pyx"], include_dirs=[synet.get_include()])
# include_path: where Cython finds synet/capi.pxd, also for an editable install (whose import hook puts
# no folder of synet's on sys.path)
setup(name="synet-example",
      ext_modules=cythonize([extension], language_level=3, include_path=[os.path.dirname(synet.get_include())]))
