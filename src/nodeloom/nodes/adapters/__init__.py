"""Adapters to hosted generators (Replicate, fal, ComfyUI, OpenAI media, ElevenLabs...).

Every adapter follows one policy, ``policy.py``: a provider node waits on the event loop
(waiting is I/O), never in a sandbox process; retries honour ``Retry-After``; the provider's
job id is stored on the node run before waiting, so a node run again after a crash attaches
to it instead of paying twice; downloads are bounded, SSRF-checked and decoded in a sandbox
(``media.py``). See docs/adr/0400-provider-adapters.md.
"""
