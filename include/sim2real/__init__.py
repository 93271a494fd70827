"""Sim-to-Real loop on AWS, orchestrated by Apache Airflow 3.

Subpackages:

* ``sim2real.hooks`` / ``operators`` / ``sensors`` / ``triggers`` / ``waiters`` / ``links``:
  AWS code in the style of ``apache-airflow-providers-amazon``.
* ``sim2real.workloads``: the training and evaluation entrypoints run by AWS Batch and the
  evaluation workstation (torch, skrl, gymnasium/MuJoCo; imported only where they run).
* ``sim2real.edge``: the policy server and model export for the Greengrass components.
* ``sim2real.sandbox``: the local AWS sandbox (moto + gap patches + responders).
"""

__version__ = "0.1.0"
