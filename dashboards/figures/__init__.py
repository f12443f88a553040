"""Figures as plain functions: a report dict (or a DataFrame) in, a plotly Figure out; no server needed.

Panels that hold one bar or point per rank carry the rank in ``customdata`` (first column), per step the
step, per collective instance its position in the ``collectives`` detail table: the dashboard's clicks read it.
"""
