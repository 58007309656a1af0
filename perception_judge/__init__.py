"""perception-judge: train multimodal LLM judges that look at the image before they believe the text.

Stages (one subpackage each) share :mod:`perception_judge.core.schema`, :mod:`perception_judge.core.protocol`,
:mod:`perception_judge.rewards` and :mod:`perception_judge.core.images`:

* :mod:`perception_judge.ppjd`        — the PPJD builder (synthetic source, teacher, counterfactuals, export)
* :mod:`perception_judge.train`       — GRPO training on trl (``train_grpo.py``)
* :mod:`perception_judge.evaluation`  — judge backends, bias / perception suites, benchmarks, sweeps, reports
"""

__version__ = "0.1.0"
