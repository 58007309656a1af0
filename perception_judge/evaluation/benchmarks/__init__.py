"""Judge benchmarks (``mllm_judge``, ``vlrewardbench``, ``mjbench``) and judge biases (``position``, ``verbosity``,
``self_enhancement``) as evaluation suites; see ``docs/benchmarks.md``."""
