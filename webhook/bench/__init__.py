"""Benchmarks behind `allot bench`: each prints figures and ratios against a baseline run side by side."""
