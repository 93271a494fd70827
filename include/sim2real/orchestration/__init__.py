"""The Airflow side of the Sim-to-Real loop: what runs in the MWAA scheduler, workers and triggerer.

* ``hooks`` / ``operators`` / ``sensors`` / ``triggers`` / ``waiters`` / ``links``: AWS code in the
  style of ``apache-airflow-providers-amazon``.
* ``stages`` (one module per stage: its form fields, plan section, task group, lineage sources and docs)
  and ``params`` (the trigger form and its cross-field rules).
* ``report``, ``lineage``, ``plots``, ``budget``, ``cost_actual``, ``notifications``, ``release``, ``sweeper``
  (``orphans``, ``run_records``), ``config``: reporting, cost, configuration and the release and clean-up logic.

May import :mod:`sim2real.contract`, never the workloads, edge or dev packages.
"""
