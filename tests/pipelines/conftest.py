"""tests/pipelines: the GR00T pipeline definition, dataset transform, smoke check and upsert.

``sdk/`` needs the pipeline toolchain venv (SageMaker SDK, pyarrow) and is run inside it by
``test_pipeline_venv.py`` (which builds that venv with ``make pipeline-venv``), never collected
by the main venv's pytest.
"""

collect_ignore = ["sdk"]
