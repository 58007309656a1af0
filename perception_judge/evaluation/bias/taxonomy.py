"""The MM-JudgeBias taxonomy: nine bias types in three categories, each measured by Bias-Deviation ``bd`` (the
perturbation destroys the evidence: a good judge lowers its score) or Bias-Conformity ``bc`` (the meaning is
preserved: it keeps it). Names, categories, metrics and order follow ``naver-ai/MM-JudgeBias``
(``mm_judgebias/bias.py``, Apache-2.0) so that per-bias numbers line up with the published leaderboard.
"""

from __future__ import annotations

from dataclasses import dataclass

INTEGRALITY, CONGRUITY, ROBUSTNESS = "integrality", "congruity", "robustness"
CATEGORIES: tuple[str, ...] = (INTEGRALITY, CONGRUITY, ROBUSTNESS)
BD, BC = "bd", "bc"


@dataclass(frozen=True)
class BiasSpec:
    """One bias type: its key, category, short name (the report's column) and what the perturbation does."""

    bias_type: str
    category: str
    short: str
    perturbation: str

    @property
    def metric(self) -> str:
        """Bias-Conformity for the meaning-preserving (robustness) types, Bias-Deviation for the others."""
        return BC if self.category == ROBUSTNESS else BD


BIASES: tuple[BiasSpec, ...] = (
    BiasSpec("text_dominance", INTEGRALITY, "TD", "I' = null image (black 224x224)"),
    BiasSpec("image_dominance", INTEGRALITY, "ID", "Q' = empty query"),
    BiasSpec("response_dominance", INTEGRALITY, "RD", "Q' = empty query and I' = null image"),
    BiasSpec("instruction_misalignment", CONGRUITY, "InstrMis", "Q' = an unrelated query from another item"),
    BiasSpec("image_misalignment", CONGRUITY, "ImgMis", "I' = an unrelated image"),
    BiasSpec("detail_description", ROBUSTNESS, "DetailDesc", "Q' = Q + a detailed description of the image"),
    BiasSpec("unnecessary_image", ROBUSTNESS, "UnnecImg", "a text-only item; I' = an unrelated image added"),
    BiasSpec(
        "visual_transformation",
        ROBUSTNESS,
        "VisTrans",
        "I' = a semantics-preserving geometric / photometric transform of I",
    ),
    BiasSpec(
        "texture_insertion",
        ROBUSTNESS,
        "TextIns",
        "I' = I with the query keywords rendered in a strip below it",
    ),
)
"""The nine bias types in the published order (ids 0..1803 of the official data follow this order)."""

BIAS_TYPES: tuple[str, ...] = tuple(b.bias_type for b in BIASES)
BY_TYPE: dict[str, BiasSpec] = {b.bias_type: b for b in BIASES}


def get_bias(bias_type: str) -> BiasSpec:
    """The spec of a bias type; a clear error lists the known keys."""
    try:
        return BY_TYPE[bias_type]
    except KeyError:
        raise ValueError(f"unknown bias type {bias_type!r}; known: {', '.join(BIAS_TYPES)}") from None


def normalize_category(value: str) -> str:
    """Our key of a category, also as the official data spells it ("Integrality", "integrality ")."""
    key = str(value).strip().lower()
    if key not in CATEGORIES:
        raise ValueError(f"unknown bias category {value!r}; known: {', '.join(CATEGORIES)}")
    return key


def biases_in(category: str) -> tuple[BiasSpec, ...]:
    return tuple(b for b in BIASES if b.category == normalize_category(category))


def select(bias_types: list[str] | tuple[str, ...] | None) -> tuple[BiasSpec, ...]:
    """The specs for a subset of types (None = all nine), in the canonical order."""
    wanted = {get_bias(t).bias_type for t in bias_types or BIAS_TYPES}
    return tuple(b for b in BIASES if b.bias_type in wanted)
