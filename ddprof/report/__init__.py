"""The report's contract: every section's rows declared once as typed records, the version, and the JSON
Schema generated from them (:mod:`.schema`); the detail tables written beside the JSON and read back
(:mod:`.tables`). Core: the analyses build reports to this contract, renderers and consumers read it."""
