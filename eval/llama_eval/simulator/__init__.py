"""A stand-in for an OpenAI-compatible LLM server that answers dataset
questions correctly with a chosen probability, for testing llama-eval."""
