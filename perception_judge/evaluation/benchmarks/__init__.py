"""Judge benchmarks and conventional judge biases, as evaluation suites.

==================  =========================================================================================
suite               what it measures
==================  =========================================================================================
mllm_judge          MLLM-as-a-Judge pair / score / batch (:mod:`.mllm_judge`)
vlrewardbench       VL-RewardBench pairwise accuracy, both orders (:mod:`.vlrewardbench`)
mjbench             MJ-Bench alignment / safety / quality, two images per item (:mod:`.mjbench`)
position            position bias: consistency and first-position win rate (:mod:`.position`)
verbosity           verbosity bias: padded responses (:mod:`.verbosity`)
self_enhancement    self-enhancement bias: own vs others' responses (:mod:`.self_enhancement`)
==================  =========================================================================================

Each module's ``run(backend, config) -> SuiteResult`` is registered in
:data:`perception_judge.evaluation.base.SUITES`. Metric formulas live in :mod:`.metrics`; file reading, images,
the judge loop and seed aggregation in :mod:`.common`; the both-orders pair engine and the pair sources of the
bias suites in :mod:`.pairs`. See ``docs/benchmarks.md``.
"""
