"""Judge benchmarks (``mllm_judge``, ``vlrewardbench``, ``mjbench``, ``multimodal_rewardbench``, ``mmrb2``) and
judge biases (``position``, ``verbosity``, ``self_enhancement``) as evaluation suites; see ``docs/benchmarks.md``."""
