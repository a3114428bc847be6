# One image for every service of ours in docker-compose.yaml: brokers, the mirror, Airflow's
# components, the Spark workers (their Python workers must import logbroker and fastavro, and
# run the same Python minor version as the driver), and spark-submit.
FROM python:3.11-slim-bookworm

# A JRE for Spark; procps because Spark's scripts call ps; gcc and zlib's headers because
# `pip install -e .` compiles the message-set walks (setup.py, protocol/_native.pyx).
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps gcc zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The pinned packages first: this layer is rebuilt only when the lock changes.
COPY requirements.lock ./
RUN pip install --no-cache-dir uv==0.13.9 \
 && uv pip install --system --no-cache --compile-bytecode -r requirements.lock

COPY pyproject.toml setup.py README.md ./
COPY plugins ./plugins
COPY spark_apps ./spark_apps
COPY include ./include
COPY dags ./dags
COPY scripts ./scripts
RUN pip install --no-cache-dir --no-deps --no-build-isolation -e . \
 && python scripts/compile_readers.py

# No PYTHONPATH: the install makes every package importable, and Airflow finds the pages'
# plugin through its entry point (plugins/ holds nothing for Airflow's plugins folder).
ENV PYSPARK_PYTHON=python3 \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/app/dags \
    AIRFLOW__CORE__PLUGINS_FOLDER=/app/plugins \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
