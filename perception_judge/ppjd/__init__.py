"""The PPJD builder: synthetic source, teachers, verified counterfactuals, crash-safe runs, training export.

Modules: :mod:`~perception_judge.synth` (procedural source), :mod:`~perception_judge.ppjd.sources`
(JSONL / parquet / MMPR / synth folders), :mod:`~perception_judge.ppjd.teacher` (stages, prompts, the LLM
teacher), :mod:`~perception_judge.ppjd.programmatic` (the offline teacher), :mod:`~perception_judge.ppjd.validate`,
:mod:`~perception_judge.core.jsonparse`, :mod:`~perception_judge.core.answers`, :mod:`~perception_judge.ppjd.store`
(shards, failures, manifest), :mod:`~perception_judge.ppjd.runner` (the build loop),
:mod:`~perception_judge.ppjd.export` and :mod:`~perception_judge.ppjd.cli`. See docs/ppjd.md.
"""
