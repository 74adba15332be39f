"""Build of the entrokv Python client: generates the gRPC stubs from the
repository's proto/ with the system protoc (see gen_stubs.py)."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_stubs  # noqa: E402


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        gen_stubs.generate(self.build_lib)


setup(cmdclass={"build_py": BuildWithStubs})
