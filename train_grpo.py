"""GRPO training of a multimodal LLM judge.

    accelerate launch train_grpo.py recipes/flex7b.yaml [--key value ...]

The recipe (YAML) sets trl's GRPOConfig / ModelConfig / ScriptArguments and the project's own arguments
(perception_judge/train/args.py); command-line flags override it. See docs/training.md.
"""

import sys

from perception_judge.train.run import main

if __name__ == "__main__":
    sys.exit(main())
