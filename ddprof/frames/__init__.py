"""Polars helpers shared by the readers, ingestion and the analyses: joins on several key columns that may
hold nulls (:mod:`.keyjoin`)."""
