"""Evaluation: judge backends, the compositional-bias and perceptual-sensitivity suites, judge benchmarks,
conventional judge biases, checkpoint sweeps and reports.

Contracts (see :mod:`perception_judge.evaluation.base`): a *backend* turns ``JudgeRequest`` objects into
``JudgeResult`` objects; a *suite* is ``run(backend, config) -> SuiteResult``, registered by name in
``perception_judge.evaluation.base.SUITES``; sweeps and reports only ever see ``SuiteResult`` objects.
"""
