"""The one compiled module, logbroker.protocol._native (issue 33); the rest is pyproject.toml.

Optional: where there is no C compiler, no zlib header or no Cython, the install still
succeeds (with a warning) and message_set.py's pure-Python walks run; `logbroker --version`
says which.
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython at build time: pure Python
    ext_modules = []
else:
    ext_modules = cythonize(
        [
            Extension(
                "logbroker.protocol._native",
                ["plugins/logbroker/protocol/_native.pyx"],
                libraries=["z"],  # zlib's crc32
                depends=["plugins/logbroker/protocol/_crc32.h"],  # the CRC-32 it calls
            )
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:
        extension.optional = True  # a failed compile is a warning (cythonize drops the flag)

setup(ext_modules=ext_modules)
