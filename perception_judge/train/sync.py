"""The LoRA weight sync into vLLM with one module gathered at a time (docs/training.md "Weight sync"): trl 1.16
gathers every parameter at once under ZeRO-3 to merge the adapter (62.8 GiB per GPU for flex32b). peft's own
per-layer ``merge`` runs here on copies of one module's base weights, so the trained weights are never written."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from itertools import groupby
from types import MethodType
from typing import Any


@contextmanager
def _merged(module: Any):
    """``module``'s base weights with its active adapters merged, in copies (the originals are back on exit)."""
    kept = [(p, p.data) for p in module.get_base_layer().parameters(recurse=False)]
    for p, data in kept:
        p.data = data.clone()
    module.merge()
    try:
        yield
    finally:
        if module.merged:
            module.unmerge()  # on the copies: peft's bookkeeping (merged adapters, DoRA's cached norm) as it was
        for p, data in kept:
            p.data = data


def layerwise_named_params(gen: Any):
    """trl's ``VLLMGeneration._iter_named_params`` for a PEFT model (the same pairs in the same order), gathering
    one module's parameters at a time: a LoRA module's with its adapters, merged."""
    from peft.tuners.lora import LoraLayer

    model = gen.model
    lora = {f"{name}.base_layer": m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    kept = [
        (n, p) for n, p in model.named_parameters() if model.prefix not in n and "original_module" not in n
    ]
    for owner, items in groupby(kept, key=lambda item: item[0].rpartition(".")[0]):
        module, group = lora.get(owner), list(items)
        params = list(module.parameters()) if module else [p for _, p in group]
        with gen._dist.gather_params(params), _merged(module) if module else nullcontext():
            for name, param in group:
                name = name.removeprefix("base_model.model.").replace(".base_layer", "")
                yield gen._fix_param_name_to_vllm(name, ["modules_to_save.default."]), param.data


def use_layerwise_sync(gen: Any) -> None:
    """Route trl's weight sync of a PEFT model through :func:`layerwise_named_params` (trl's FSDP path stays);
    refuses what this merge is not known to reproduce: other tuners, LoRA variants but DoRA, what peft refuses."""
    from accelerate.utils import is_peft_model
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import BaseTunerLayer

    if not is_peft_model(gen.model) or gen._dist.is_fsdp:
        return
    gen.model.base_model._check_merge_allowed()  # peft's own refusals (GPTQ, replicated layers, ...)
    for name, module in gen.model.named_modules():
        names = [type(v).__name__ for v in getattr(module, "lora_variant", {}).values()]
        odd = [v for v in names if not v.startswith("Dora")]
        if isinstance(module, BaseTunerLayer) and (odd or not isinstance(module, LoraLayer)):
            what = odd or type(module).__name__
            raise ValueError(
                f"vLLM weight sync: {name} is {what}; the per-layer merge takes LoRA and DoRA only"
            )
    gen._iter_named_params = MethodType(layerwise_named_params, gen)
