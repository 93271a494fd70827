"""The GR00T fine-tuning SageMaker pipeline: its definition and the code its steps run.

* ``build``: generates the definition with the SageMaker Python SDK v3 (pinned in
  ``requirements-pipeline.txt``, own venv; ``make pipeline-definition``) into the committed
  template ``groot_pipeline.template.json``.
* ``groot``: fills the template's placeholders for one environment (plain JSON, no SDK import);
  what the DAG's ``vla.pipeline_definition`` task and the sandbox use.
* ``transform_dataset`` (TransformDataset), ``finetune_entry`` (GR00TFinetune),
  ``smoke_eval`` (SmokeEval): the entry points of the images in ``containers/groot``.
"""
