"""Summaries, statistics, comparisons of runs, and the text and HTML reports."""
