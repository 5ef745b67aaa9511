"""Files an account brings: plan limits, and the acceptance that sniffs them (nodes/sniff.py),
decodes and converts them in the sandbox (docs/media-inputs.md)."""
