"""The compositional-bias suite (MM-JudgeBias): taxonomy, perturbation generators, metrics, the official-data
loader and the suite runner (:func:`perception_judge.evaluation.bias.suite.run`)."""
