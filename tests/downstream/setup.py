"""A downstream extension that cimports synet (built by tests/test_downstream.py)."""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

import synet

# SYNET_DOWNSTREAM_CFLAGS: more compiler flags (the tests build it with -ffast-math too)
extension = Extension("synet_downstream", ["synet_downstream.pyx"], include_dirs=[synet.get_include()],
                      extra_compile_args=["-O2", *os.environ.get("SYNET_DOWNSTREAM_CFLAGS", "").split()])
setup(name="synet-downstream", ext_modules=cythonize([extension], language_level=3))
