"""A downstream extension that cimports synet (built by tests/test_downstream.py)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

import synet

extension = Extension("synet_downstream", ["synet_downstream.pyx"], include_dirs=[synet.get_include()],
                      extra_compile_args=["-O2"])
setup(name="synet-downstream", ext_modules=cythonize([extension], language_level=3))
