"""Private infrastructure shared by the whole package: no algorithm and no command line here.

* :mod:`~gpumine.utils._validation`: every user input becomes a tensor (with
  errors that name the parameter and the fix), and every result is handed back
  as the configured ``output_type``.
* :mod:`~gpumine.utils._atomic`: the one atomic writer, :func:`atomic_open`
  (exported to users as :func:`gpumine.io.atomic_open`).
* :mod:`~gpumine.utils._lazy`: package attributes loaded on first use.
* :mod:`~gpumine.utils._progress`: the progress bar, drawn only on a terminal.

The rule: nothing in ``gpumine.utils`` imports from ``neighbors``, ``outliers``,
``counting``, ``stream``, ``distributed``, ``io``, ``datasets``, ``data``, ``core`` or the command line; they
all import from here (only :mod:`gpumine.config` sits below). This package exports
nothing; callers import the module they need.
"""

__all__: list[str] = []
