"""GRPO training of multimodal judges on trl's ``GRPOTrainer``, behind ``train_grpo.py`` (docs/training.md)."""
