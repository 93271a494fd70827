# The Airflow image for running the sim2real DAGs outside MWAA (any Airflow 3.3 deployment:
# docker compose, Kubernetes with the official Helm chart). MWAA itself takes the bundle from
# `make package` instead. Build from the repository root:  docker build -t sim2real-airflow .
# The image carries the Airflow package and the contract, nothing else of the project: their wheels, built by
# scripts/build_wheels.py from only those two packages' sources (setuptools pinned in constraints.txt).
FROM python:3.11.11-slim-bookworm AS wheels
WORKDIR /src
COPY pyproject.toml constraints.txt ./
COPY scripts/build_wheels.py scripts/
COPY include/sim2real/contract/ include/sim2real/contract/
COPY include/sim2real/orchestration/ include/sim2real/orchestration/
RUN pip install --no-cache-dir --disable-pip-version-check setuptools -c constraints.txt \
    && python scripts/build_wheels.py --out /wheels contract orchestration

FROM apache/airflow:3.3.1-python3.12

# The runtime resolved against the Amazon MWAA 3.3.1 set, the versions the project is tested on (the MWAA
# image's packages, then Airflow's constraints for the rest); apache-airflow stays the image's version.
COPY --chown=airflow:0 requirements.txt /opt/sim2real/requirements.txt
COPY --chown=airflow:0 constraints/ /opt/sim2real/constraints/
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" -r /opt/sim2real/requirements.txt \
        -c /opt/sim2real/constraints/mwaa-3.3.1.txt -c /opt/sim2real/constraints/mwaa-3.3.1-airflow.txt

# The project's Airflow package (operators, hooks, triggers, waiters, links, config) and the contract, without
# dependencies: they are the runtime pins above.
COPY --from=wheels --chown=airflow:0 /wheels/ /opt/sim2real/wheels/
RUN pip install --no-cache-dir --no-deps /opt/sim2real/wheels/sim2real_contract-*.whl \
        /opt/sim2real/wheels/sim2real_orchestration-*.whl

COPY --chown=airflow:0 dags/ /opt/airflow/dags/
COPY --chown=airflow:0 plugins/ /opt/airflow/plugins/

# Deferrable waits by default (the DAG relies on it), as on MWAA.
ENV AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=True \
    AIRFLOW__CORE__LOAD_EXAMPLES=False

# Build check: the DAGs parse with no import error in this image (a throwaway SQLite database).
RUN export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=sqlite:////tmp/build-check.db \
 && airflow db migrate >/dev/null \
 && airflow dags list --local -o plain | grep -w sim_to_real \
 && airflow dags list-import-errors --local -o plain | grep -q "No data found" \
 && rm -f /tmp/build-check.db
