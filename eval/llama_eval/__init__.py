"""Accuracy evaluation of OpenAI-compatible LLM servers (llama-eval) and a
simulated server to test it against (llama-server-simulator)."""
