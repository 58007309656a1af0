"""The toy wing: everything the CPU demo and the tests run on, above the pipeline (no production module imports it;
its modules: docs/architecture.md). This namespace re-exports the Qwen scaffolding, which imports nothing of the
project but :mod:`perception_judge.core`: Qwen's real tokenizer (:mod:`~perception_judge.tiny.qwen_vocab`) and the
real Qwen-VL chat templates and processor settings (:mod:`~perception_judge.tiny.qwen_vl`).
"""

from perception_judge.tiny.qwen_vl import (
    ARCHS,
    GENERATION_EOS,
    IMAGE_SETTINGS,
    SPECIAL_IDS,
    TEMPLATE_FILES,
    TOKENIZER_VARIANT,
    chat_template,
    qwen_vl_processor,
)
from perception_judge.tiny.qwen_vocab import (
    QWEN2_5_VL_7B_VOCAB_SIZE,
    QWEN_VOCAB_SIZE,
    VARIANTS,
    qwen_backend,
    qwen_tokenizer,
)

__all__ = [
    "ARCHS",
    "GENERATION_EOS",
    "IMAGE_SETTINGS",
    "QWEN2_5_VL_7B_VOCAB_SIZE",
    "QWEN_VOCAB_SIZE",
    "SPECIAL_IDS",
    "TEMPLATE_FILES",
    "TOKENIZER_VARIANT",
    "VARIANTS",
    "chat_template",
    "qwen_backend",
    "qwen_tokenizer",
    "qwen_vl_processor",
]
