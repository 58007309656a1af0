"""Evaluation: judge backends, the compositional-bias and perceptual-sensitivity suites, judge benchmarks,
conventional judge biases, checkpoint sweeps and reports (contracts: :mod:`perception_judge.evaluation.base`).
"""
