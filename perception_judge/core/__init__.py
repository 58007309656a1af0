"""The shared core every stage stands on; it imports nothing of the stages.

One module per concern (schema, protocol, images, answers, jsonparse, trainset, io, runinfo, redact,
options); each module's docstring says what it owns, and docs/architecture.md draws them.
"""
