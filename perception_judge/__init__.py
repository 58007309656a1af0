"""perception-judge: train multimodal LLM judges that look at the image before they believe the text.

A pipeline of stages over a small shared core (:mod:`perception_judge.core`): the synthetic world
(:mod:`~perception_judge.synth`), the PPJD builder (:mod:`~perception_judge.ppjd`), GRPO training on trl
(:mod:`~perception_judge.train`, ``train_grpo.py``) and evaluation (:mod:`~perception_judge.evaluation`);
docs/architecture.md draws the parts and the files between them.
"""

__version__ = "0.1.0"
