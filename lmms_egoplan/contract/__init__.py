"""The contract between a benchmark and the harness adapters, on a floor of its own that imports no harness, no
workaround (``compat``), no judge engine and no report: ``benchmark`` (what a benchmark is: one ``Benchmark`` value,
what a task does: a ``TaskSpec`` whose hooks get a ``TaskContext``), ``adapter`` (what a hook may read of the adapter
that runs it, and what compat may call on it: Protocols) and ``judged`` (judged metrics as declarations, which the
adapters' ``harness.judged`` turns into judge calls)."""
