"""The shared core every stage stands on; it imports nothing of the stages.

* :mod:`~perception_judge.core.schema`    -- the PPJD record, source items, judge requests, keys
* :mod:`~perception_judge.core.protocol`  -- judge prompts (single / pair / batch) and the one score parser
* :mod:`~perception_judge.core.images`    -- loading, converting and bounding images; the pixel policy
* :mod:`~perception_judge.core.answers`   -- final-answer extraction and comparison
* :mod:`~perception_judge.core.jsonparse` -- JSON objects out of model output
* :mod:`~perception_judge.core.trainset`  -- the training-set row (the export schema)
* :mod:`~perception_judge.core.io`        -- the atomic writer and the progress bar
* :mod:`~perception_judge.core.runinfo`   -- the run file (``RunInfo``)
* :mod:`~perception_judge.core.redact`    -- secrets out of everything written
* :mod:`~perception_judge.core.options`   -- typed options of jobs and suites
"""
