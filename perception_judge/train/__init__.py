"""GRPO training of multimodal judges on trl's ``GRPOTrainer`` (entry point: ``train_grpo.py`` at the repo root).

Modules: ``args`` (the project's recipe arguments), ``recipe`` (parsing and fail-fast validation), ``data`` (training
set checks, protocol mix, overlong prompts, pixel policy), ``models`` (model/processor loading, LoRA, vision-tower
freezing, adapter merging), ``rewards`` (reward wiring), ``trainer`` (the thin ``GRPOTrainer`` subclass),
``callbacks`` (tracking), ``card`` (run file and model card), ``run`` (the run itself), ``cli`` (``merge-lora``),
``toyset`` (a synthetic training set for tests and benchmarks). Guide: docs/training.md.
"""
