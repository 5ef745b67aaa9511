"""Files an account brings: plan limits, content sniffing, and the ingest that decodes and
converts them in the sandbox (docs/media-inputs.md)."""
