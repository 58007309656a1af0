"""The PPJD builder: sources, teachers, validation, the resumable store, the build loop and the export
(docs/ppjd.md)."""
