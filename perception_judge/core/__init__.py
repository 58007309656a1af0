"""The shared core every stage stands on; it imports nothing of the stages.

* :mod:`~perception_judge.core.schema`    -- the PPJD record, source items, keys
* :mod:`~perception_judge.core.protocol`  -- judge prompts (single / pair / batch) and verdict parsing
* :mod:`~perception_judge.core.images`    -- loading, converting and bounding images
* :mod:`~perception_judge.core.answers`   -- final-answer extraction and comparison
* :mod:`~perception_judge.core.jsonparse` -- JSON objects out of model output
* :mod:`~perception_judge.core.trainset`  -- the training-set row (the export schema)
* :mod:`~perception_judge.core.io`        -- atomic writes, JSON lines, progress, the run file (``RunInfo``)
* :mod:`~perception_judge.core.redact`    -- secrets out of everything written
"""
