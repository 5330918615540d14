"""Judge backends: any OpenAI-compatible server (``openai_compatible``) and an in-process
transformers model (``transformers``). Each imports its client library only when built."""
