"""Dashboards: interactive views over the store (needs the `dash` extra)."""
