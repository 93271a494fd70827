"""What every runtime of the Sim-to-Real loop agrees on (standard library only).

Installed everywhere: in the MWAA environment (plugins.zip), in the training and fine-tuning
images, on the evaluation workstation and in the Greengrass components. Nothing here imports a
third-party package at import time (``storage`` imports boto3 on its first S3 call).

* :mod:`~sim2real.contract.run_key`: the run key that names a run's S3 prefix, jobs and tags.
* :mod:`~sim2real.contract.stats`: the Wilson score interval used by the evaluation gate.
* :mod:`~sim2real.contract.modality`: the GR00T modality layout shared by export and policy server.
* :mod:`~sim2real.contract.storage`: bytes in and out of ``s3://`` URIs and local paths.
* ``schemas/``: JSON Schemas of the artefacts the runtimes exchange.
"""

__version__ = "0.1.0"
