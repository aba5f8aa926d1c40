"""The distribution's version: the one place it is written.

pyproject.toml reads it (``[tool.setuptools.dynamic] version``), so the wheel
and sdist metadata, ``sdematrix --version``, results.json, the JUnit suites and
the HTML report all print this string.  Only the standard library may be
imported here: setuptools reads the file before any dependency is installed.
"""

__version__ = "0.1.0"
