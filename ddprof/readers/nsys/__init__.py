"""Nsight Systems SQLite exports (``nsys export --type sqlite REPORT.nsys-rep``): :mod:`.reader`."""
