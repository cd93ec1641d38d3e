"""Extracting answers from replies and grading them."""
