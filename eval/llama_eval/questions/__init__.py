"""The questions: datasets, their cases, and the prompts made of them."""
