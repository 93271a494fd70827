"""The GR00T fine-tuning SageMaker pipeline's definition, as the Airflow side upserts it.

* ``groot``: fills the committed template ``groot_pipeline.template.json`` for one environment
  (plain JSON, no SDK import); what the DAG's ``vla.pipeline_definition`` task and the sandbox use.

The template is generated with the SageMaker Python SDK by :mod:`sim2real.dev.pipeline_build`
(``make pipeline-definition``); the step scripts are in :mod:`sim2real.workloads.groot`.
"""
