"""One wait core: pure step functions (response + wait state -> :class:`~sim2real.orchestration.waits.core.Step`)
and the async driver the triggers share (:func:`~sim2real.orchestration.waits.core.drive`)."""
