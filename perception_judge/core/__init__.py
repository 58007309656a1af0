"""The shared core every stage stands on; it imports nothing of the stages. One module per concern, drawn in
docs/architecture.md."""
