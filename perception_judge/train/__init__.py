"""GRPO training of multimodal judges on trl's ``GRPOTrainer`` (entry point: ``train_grpo.py`` at the repo root):
recipe (``args``, ``recipe``), data, models, rewards, trainer and its callbacks, run file and card, the run. Guide:
docs/training.md.
"""
