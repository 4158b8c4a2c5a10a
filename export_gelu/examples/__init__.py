"""Bundled example models (random weights, real architectures) used by the demo and tests."""
