# The type of _version.py, which the build writes into the wheel (python/pyproject.toml's
# [[tool.scikit-build.generate]]); a source tree has none.
__version__: str
