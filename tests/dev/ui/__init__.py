"""Tests of the ``make ui`` stack (Airflow UI, REST API, browser)."""

#: A test module's stack is thrown away after the module: Airflow gets 2 s to stop on its own, then its process group
#: is terminated (``UiStack.stop``'s default waits 30 s; its triggerer and API server took about 11 s after a run, and
#: the run note's stack waited out the 30 s).
STOP_GRACE_S = 2
