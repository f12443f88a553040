"""Analyses: pure Polars functions over the store. LazyFrames in, DataFrames out; no printing, no plotting."""
