"""The toy wing: everything the CPU demo and the tests run on, above the pipeline (no production module imports it;
its modules: docs/architecture.md). This namespace re-exports the Qwen scaffolding, which imports nothing of the
project but :mod:`perception_judge.core`: Qwen's real tokenizer (:mod:`~perception_judge.tiny.qwen_vocab`) and the
real Qwen-VL chat templates and processor settings (:mod:`~perception_judge.tiny.qwen_vl`).
"""

from perception_judge.tiny.qwen_vl import GENERATION_EOS, TEMPLATE_FILES, chat_template, qwen_vl_processor
from perception_judge.tiny.qwen_vocab import qwen_tokenizer

__all__ = ["GENERATION_EOS", "TEMPLATE_FILES", "chat_template", "qwen_tokenizer", "qwen_vl_processor"]
