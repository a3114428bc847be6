"""The compiled modules: logbroker.protocol._native (0.7's walks, issue 33) and _native08
(0.8's, issue 44); the rest is pyproject.toml.

Optional: where there is no C compiler, no zlib header or no Cython, the install still
succeeds (with a warning) and the pure-Python walks run; `logbroker --version` says which.
"""

import os

from setuptools import Extension, find_namespace_packages, setup

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
            ),
            Extension(
                "logbroker.protocol._native08",
                ["plugins/logbroker/protocol/_native08.pyx"],
                libraries=["z"],
                depends=["plugins/logbroker/protocol/_crc32.h"],
            ),
        ],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )
    for extension in ext_modules:
        extension.optional = True  # a failed compile is a warning (cythonize drops the flag)

# What is installed: the library, the warehouse, the Airflow hooks and pages (plugins/), the
# Spark applications (spark_apps/, at the repository root), and include/'s data files as the
# package `logbroker_include` (include/__init__.py lists them), which a checkout's editable
# install maps to the folder itself: one lookup finds them in a checkout and in a wheel
# (logbroker/include_files.py). Here, not in pyproject.toml: its package discovery cannot give
# a folder a name of its own, and a top-level `include` would shadow an Airflow project's.
PLUGINS = find_namespace_packages(
    "plugins", include=["logbroker*", "pipeline_warehouse*", "hooks*", "pipeline_ui*"]
)
APPS = find_namespace_packages(".", include=["spark_apps*"])

setup(
    # LOGBROKER_PURE_PYTHON=1 builds no extension, as it runs none (tests/deploy/test_wheel.py)
    ext_modules=[] if os.environ.get("LOGBROKER_PURE_PYTHON") == "1" else ext_modules,
    packages=[*PLUGINS, *APPS, "logbroker_include"],
    package_dir={
        **{name: f"plugins/{name}" for name in PLUGINS if "." not in name},
        "logbroker_include": "include",
    },
    package_data={
        "pipeline_ui": ["templates/*.html"],
        "logbroker_include": [
            "schemas/*.avsc",
            "expectations/*.json",
            "report_assets/**/*",
            "report_templates/*.html",
        ],
    },
)
